"""A model directory's files: the per-epoch checkpoint (save, resume), best and final models.

Everything random derives from ``spec.seed`` and the epoch number, and a checkpoint holds
the torch RNG state, so a run resumed from it follows the same trajectory as an
uninterrupted one.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dparallel.config import differences
from dparallel.errors import CheckpointMismatchError
from dparallel.nn import load_torch_file, save_torch_file
from dparallel.nn import model_file as _model_file
from dparallel.train.spec import TrainingSpec

if TYPE_CHECKING:
    from pathlib import Path

    from dparallel.nn import HDNNP
    from dparallel.train.optimizers import Optimizer

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"
BEST = "best.pt"
SPEC_JSON = "spec.json"
#: Training keys a resumed run may change: ``epochs``, ``allow_incomplete`` and those
#: that say how fast, not what (``device`` and ``data_on_device``: a run may resume on
#: another device, bitwise on the same; the read-ahead and torch's threads).
_RESUMABLE_KEYS = frozenset(
    {
        "epochs",
        "allow_incomplete",
        "device",
        "data_on_device",
        "batch_prefetch",
        "prefetch",
        "threads",
    }
)


@dataclass
class Progress:
    """Where a run stands: next epoch, best monitored loss so far, epochs without gain."""

    start_epoch: int = 0
    best_val: float = math.inf
    best_epoch: int = -1
    bad_epochs: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    #: which structures ``best_val`` was measured on: the monitored split, validation or
    #: (without one) training (:func:`split_digest`)
    validation_digest: str = ""


#: The progress a checkpoint keeps (the next epoch is its ``epoch`` + 1).
_PROGRESS = [f.name for f in fields(Progress) if f.name != "start_epoch"]
#: Progress that checkpoints written before it was kept lack (its default then).
_PROGRESS_ADDED = {"validation_digest"}
#: What a checkpoint must hold to resume from it: the run's state and its progress.
_CHECKPOINT_KEYS = {"epoch", "model", "optimizer", "rng", "spec", *_PROGRESS} - _PROGRESS_ADDED


def split_digest(ids: np.ndarray) -> str:
    """A short digest of a split's source indices (which structures it holds)."""
    return hashlib.sha256(np.sort(np.asarray(ids, np.int64)).tobytes()).hexdigest()[:16]


def model_file(model: HDNNP, spec: TrainingSpec, descriptor: dict | None) -> dict[str, Any]:
    """The saved trained model (``model.pt``): config, weights, descriptor spec, spec."""
    return _model_file(model, spec.to_dict(), descriptor, spec.descriptor)


def save_model(model: HDNNP, spec: TrainingSpec, descriptor: dict | None, path: Path) -> None:
    """Write ``model`` as a model file (``best.pt``, ``model.pt``), atomically."""
    save_torch_file(model_file(model, spec, descriptor), path)


def save_checkpoint(
    path: Path,
    epoch: int,
    model: HDNNP,
    optimizer: Optimizer,
    progress: Progress,
    spec: TrainingSpec,
    descriptor: dict | None = None,
) -> None:
    """Write the checkpoint after ``epoch``: weights, optimizer, schedule, RNG, progress
    and the descriptor spec the model's inputs are (compared on resume)."""
    save_torch_file(
        {
            "epoch": epoch,
            "model": model.state_dict(),
            **optimizer.state_dict(),  # "optimizer", "scheduler"
            "rng": {"torch": torch.get_rng_state()},
            "loader": {"seed": spec.seed, "next_epoch": epoch + 1},
            **{name: getattr(progress, name) for name in _PROGRESS},
            "spec": spec.to_dict(),
            "descriptor": descriptor,
        },
        path,
    )


def resume_from(
    path: Path,
    spec: TrainingSpec,
    model: HDNNP,
    optimizer: Optimizer,
    descriptor: dict | None = None,
) -> Progress:
    """Load the checkpoint at ``path`` into model, optimizer, schedule and RNG.

    Tensors load onto the model's device (``map_location``): a checkpoint written on one
    device (saved device-neutral, on the CPU) resumes on any.

    Raises
    ------
    TrainingError
        No checkpoint, not a dparallel checkpoint, or trained with another config
        (keys other than ``epochs``, ``allow_incomplete`` and where the data and model
        live differ), or with another ``descriptor`` spec (a checkpoint that records one).
    """
    if not path.is_file():
        raise CheckpointMismatchError(f"--resume: no checkpoint at {path}")
    device = next(model.parameters()).device
    ck = load_torch_file(path, "checkpoint", map_location=device)
    if not set(ck) >= _CHECKPOINT_KEYS:
        raise CheckpointMismatchError(
            f"{path}: not a dparallel checkpoint (missing "
            f"{', '.join(sorted(_CHECKPOINT_KEYS - set(ck)))})"
        )
    fields = TrainingSpec.model_fields  # keys added since the checkpoint: their default
    compared = [k for k in fields if k not in _RESUMABLE_KEYS]
    old = {k: ck["spec"].get(k, fields[k].default) for k in compared}
    new = {k: v for k, v in spec.to_dict().items() if k in compared}
    diff = differences(old, new, depth=1)
    if diff:
        then_now = "; ".join(f"{key}: {a!r} → {b!r}" for key, a, b in diff)
        raise CheckpointMismatchError(
            f"--resume: {path} was trained with another config ({then_now}); use the same "
            "config or a new MODEL_DIR"
        )
    if ck.get("descriptor") is not None and ck["descriptor"] != descriptor:
        raise CheckpointMismatchError(
            f"--resume: {path} was trained on other {spec.descriptor} descriptors than these "
            "(the store's, or those given); use the same descriptors or a new MODEL_DIR"
        )
    model.load_state_dict(ck["model"])
    optimizer.load_state_dict(ck)
    torch.set_rng_state(ck["rng"]["torch"])
    progress = Progress(
        start_epoch=int(ck["epoch"]) + 1, **{name: ck[name] for name in _PROGRESS if name in ck}
    )
    log.info("resumed from %s at epoch %d", path, progress.start_epoch)
    return progress
