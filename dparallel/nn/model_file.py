"""The trained-model file (``model.pt``): what it holds, and :func:`load_model` to rebuild it.

A model file is a plain dict (read with :func:`~dparallel.nn.files.load_torch_file`, so
weights only): ``format``, ``version``, the :class:`~dparallel.nn.model.HDNNP` constructor
arguments (``model_config``), its ``state_dict``, the descriptor spec and kind, and the
training spec as a dict.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dparallel.errors import TrainingError
from dparallel.nn.files import load_torch_file
from dparallel.nn.model import HDNNP

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping

    import torch

__all__ = ["MODEL", "MODEL_FORMAT", "load_model", "model_file"]

#: File name of the trained model in a model directory.
MODEL = "model.pt"
#: The ``format`` key of a model file.
MODEL_FORMAT = "dparallel-hdnnp"


def model_file(
    model: HDNNP,
    spec: Mapping[str, Any],
    descriptor: dict | None,
    descriptor_kind: str,
) -> dict[str, Any]:
    """A model file's contents: config, weights, descriptor spec and kind, training spec."""
    return {
        "format": MODEL_FORMAT,
        "version": 1,
        "model_config": model.config(),
        "state_dict": model.state_dict(),
        "descriptor": descriptor,
        "descriptor_kind": descriptor_kind,
        "spec": dict(spec),
    }


def load_model(
    path: str | os.PathLike[str], dtype: torch.dtype | None = None
) -> tuple[HDNNP, dict]:
    """Rebuild the :class:`HDNNP` from a ``model.pt`` (or a MODEL_DIR); returns (model, file)."""
    path = Path(path)
    if path.is_dir():
        path = path / MODEL
    if not path.is_file():
        raise TrainingError(f"no trained model at {path}; run `dparallel train` first")
    data = load_torch_file(path, "model file")
    if data.get("format") != MODEL_FORMAT:
        raise TrainingError(f"{path} is not a dparallel model file")
    model = HDNNP(**data["model_config"])
    sd = data["state_dict"]
    model = model.to(next(iter(sd.values())).dtype)
    model.load_state_dict(sd)
    if dtype is not None:
        model = model.to(dtype)
    model.eval()
    return model, data
