"""Which units (and label keys) the data a model was trained from came in
(``data_units.json``).

A model works in Å and eV whatever its data, but evaluating it on another file of the same
data needs that file's units and the keys of its labels: a model directory records the
store's ``config.ingest.units`` and, where given, its ``energy_key``/``forces_key``
(:func:`~dparallel.train.train` writes them beside ``model.pt``), and ``dparallel
evaluate`` reads data with them unless told otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from dparallel._files import write_file
from dparallel.config import read_json_object
from dparallel.errors import TrainingError
from dparallel.nn.folders import DATA_UNITS_JSON

if TYPE_CHECKING:
    import os

    from dparallel.store import Store

_LABEL_KEYS = ("energy_key", "forces_key")


def store_data_units(store: Store) -> str | None:
    """The units of the store's source file (``config.ingest.units``), if recorded."""
    try:
        units = store.attrs["config"]["ingest"]["units"]
    except (KeyError, TypeError):
        return None
    return units if isinstance(units, str) else None


def record_data_units(model_dir: str | os.PathLike[str], store: Store) -> None:
    """Write ``data_units.json`` in ``model_dir``: the units of the store's source file
    (:func:`store_data_units`), if recorded, its format, the label keys it was read with where they
    were given (``energy_key``, ``forces_key``) and the store's location. Written once, by
    :func:`~dparallel.train.train` (a store at a URL as a local one)."""
    units = store_data_units(store)
    if units is not None:
        ingest = store.attrs["config"]["ingest"]
        keys = {k: ingest[k] for k in _LABEL_KEYS if isinstance(ingest.get(k), str)}
        fmt = {"data_format": ingest["format"]} if isinstance(ingest.get("format"), str) else {}
        doc = {"data_units": units, **fmt, **keys, "store": str(store.location)}
        write_file(Path(model_dir) / DATA_UNITS_JSON, json.dumps(doc, indent=1) + "\n")


def _recorded(model_dir: str | os.PathLike[str]) -> dict[str, object]:
    """What :func:`record_data_units` wrote (``model_dir`` or a file in it); ``{}`` if
    there is no such file (data in ASE's units, read with the default keys).

    Raises :class:`TrainingError` for a file there that is no JSON object (truncated or
    corrupt): read as none, a model of Bohr/Hartree data or other label keys would be
    evaluated on its data read in other units or under other keys, silently.
    """
    path = Path(model_dir)
    if path.suffix == ".pt" or path.is_file():
        path = path.parent
    doc = read_json_object(path / DATA_UNITS_JSON)
    if not doc and (path / DATA_UNITS_JSON).exists():
        raise TrainingError(
            f"{path / DATA_UNITS_JSON}: not the JSON object dparallel wrote (truncated or "
            "corrupt?), so the units and label keys of the model's training data are "
            'unknown: write it again, e.g. {"data_units": "ase"}, or delete it for Å, eV '
            "and the default keys"
        )
    return doc


def recorded_data_units(model_dir: str | os.PathLike[str]) -> str | None:
    """The units recorded by :func:`record_data_units` (``model_dir`` or a file in it)."""
    units = _recorded(model_dir).get("data_units")
    return units if isinstance(units, str) else None


def recorded_data_format(model_dir: str | os.PathLike[str]) -> str | None:
    """The format of the training data's file recorded by :func:`record_data_units`."""
    fmt = _recorded(model_dir).get("data_format")
    return fmt if isinstance(fmt, str) else None


def recorded_label_keys(model_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The label keys recorded by :func:`record_data_units` (``{"energy_key": …,
    "forces_key": …}``, those given when the training data was read; ``{}``: the
    defaults)."""
    doc = _recorded(model_dir)
    return {k: v for k in _LABEL_KEYS if isinstance(v := doc.get(k), str)}
