"""What a folder given as a model is: a dparallel model directory or an n2p2 potential.

One notion for the ASE calculator, ``dparallel evaluate``, ``dparallel export`` and
:func:`~dparallel.deploy.load_deployed` (docs/n2p2.md): a folder holding an n2p2
``input.nn`` and no trained ``model.pt`` is an n2p2 potential (n2p2 files beside a
``model.pt`` belong to that dparallel model); it loads when it also holds
``scaling.data`` (its ``weights.XXX.data`` are checked as they are read).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from dparallel.nn.model import MODEL

if TYPE_CHECKING:
    import os

__all__ = [
    "DATA_UNITS_JSON",
    "N2P2_INPUT",
    "N2P2_SCALING",
    "is_n2p2_potential",
    "model_fingerprint",
    "model_folder",
    "n2p2_files_missing",
]

#: The file that makes a folder an n2p2 potential, and the statistics it needs beside.
N2P2_INPUT = "input.nn"
N2P2_SCALING = "scaling.data"
#: The units (and label keys) of a model's training data, beside its files: a dparallel
#: model directory's, and a copy in the n2p2 potential exported from it
#: (``dparallel.train.data_units``).
DATA_UNITS_JSON = "data_units.json"


def is_n2p2_potential(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder meant as an n2p2 potential: an ``input.nn``, no ``model.pt``."""
    p = Path(path)
    return p.is_dir() and (p / N2P2_INPUT).is_file() and not (p / MODEL).is_file()


def n2p2_files_missing(path: str | os.PathLike[str]) -> str | None:
    """Why the n2p2 potential folder ``path`` cannot load (the one message for every command),
    or ``None`` when it holds its ``scaling.data``."""
    p = Path(path)
    if (p / N2P2_SCALING).is_file():
        return None
    return (
        f"{p / N2P2_SCALING} is missing: {p} holds an n2p2 {N2P2_INPUT}, and an n2p2 potential "
        f"needs {N2P2_INPUT}, {N2P2_SCALING} and weights.XXX.data"
    )


def model_folder(path: str | os.PathLike[str]) -> Path:
    """The model folder ``path`` names: a file in it (``model.pt``, ``input.nn``,
    ``deployed.pt``) stands for its folder."""
    p = Path(path)
    return p.parent if p.is_file() else p


def model_fingerprint(path: str | os.PathLike[str]) -> str | None:
    """A SHA-256 over the files that say what the model in folder ``path`` computes (a
    dparallel model's ``model.pt``, an n2p2 potential's ``input.nn``, ``scaling.data`` and
    ``weights.XXX.data``; ``data_units.json`` with either), names and bytes; ``None`` where
    ``path`` holds neither (a file in the folder, ``model.pt`` or ``input.nn``, stands for
    its folder). It changes when the model is trained or exported again."""
    p = model_folder(Path(path).expanduser())
    if (p / MODEL).is_file():
        names = [MODEL]
    elif is_n2p2_potential(p):
        names = [N2P2_INPUT, N2P2_SCALING, *sorted(f.name for f in p.glob("weights.*.data"))]
    else:
        return None
    digest = hashlib.sha256()
    for name in [*names, DATA_UNITS_JSON]:
        if (p / name).is_file():
            digest.update(name.encode() + b"\0" + (p / name).read_bytes())
    return digest.hexdigest()
