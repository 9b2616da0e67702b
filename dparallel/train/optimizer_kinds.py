"""The optimizers ``optimizer:`` may name: one :class:`OptimizerKind` per name, one table.

Each entry says which class builds the optimizer (in :mod:`dparallel.train.optimizers`,
loaded on first use so the spec stays torch-free here), whether its updates need the
descriptors' dG/dr, and which of the spec's optimizer keys it reads. The spec validates
``optimizer:`` and those keys against this table (:mod:`dparallel.train.spec`) and
:func:`~dparallel.train.optimizers.make_optimizer` builds from it; no other module names
an optimizer. A new optimizer is one :class:`~dparallel.train.optimizers.Optimizer`
subclass plus one entry here (and its keys in :class:`~dparallel.train.spec.TrainingSpec`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from dparallel.errors import ConfigError

__all__ = [
    "DEFAULT_OPTIMIZER",
    "OPTIMIZERS",
    "OPTIMIZER_KEYS",
    "OptimizerKind",
    "optimizer_kind",
    "read_by_optimizer",
]


@dataclass(frozen=True)
class OptimizerKind:
    """One optimizer ``optimizer:`` may name.

    ``name``: its value of ``optimizer:``; ``title``: its name in messages; ``cls``: the
    :class:`~dparallel.train.optimizers.Optimizer` subclass that builds it (a name in
    :mod:`dparallel.train.optimizers`, :meth:`load` imports it); ``needs_derivatives``:
    its updates need the descriptors' dG/dr (stored, or computed by the kernel);
    ``reads``: the spec keys of :data:`OPTIMIZER_KEYS` it reads (the others it ignores,
    so the spec refuses them set to anything but their default).
    """

    name: str
    title: str
    cls: str
    needs_derivatives: bool
    reads: frozenset[str]

    def load(self) -> type[Any]:
        """The optimizer's class (imports torch)."""
        return getattr(importlib.import_module("dparallel.train.optimizers"), self.cls)


_GRADIENT_DESCENT = frozenset(
    {"lr", "lr_min", "weight_decay", "schedule", "plateau_factor", "plateau_patience",
     "force_weight_start"}
)  # fmt: skip
_KALMAN = frozenset(
    {"kalman_epsilon", "kalman_q0", "kalman_qtau", "kalman_qmin", "kalman_eta",
     "kalman_etatau", "kalman_etamax", "kalman_force_components"}
)  # fmt: skip

#: The optimizers by name, in the order messages list them.
OPTIMIZERS: dict[str, OptimizerKind] = {
    kind.name: kind
    for kind in (
        OptimizerKind("adam", "Adam", "Adam", False, _GRADIENT_DESCENT),
        OptimizerKind("adamw", "AdamW", "AdamW", False, _GRADIENT_DESCENT),
        OptimizerKind("kalman", "Kalman", "KalmanUpdates", True, _KALMAN),
    )
}

#: ``optimizer:`` when a config leaves it out.
DEFAULT_OPTIMIZER = "adam"

#: The spec keys that belong to some optimizer (each optimizer reads its own ``reads``).
OPTIMIZER_KEYS: frozenset[str] = frozenset().union(*(k.reads for k in OPTIMIZERS.values()))


def optimizer_kind(name: str) -> OptimizerKind:
    """The optimizer ``name``; a :class:`ConfigError` lists the known ones."""
    kind = OPTIMIZERS.get(name)
    if kind is None:
        known = ", ".join(OPTIMIZERS)
        raise ConfigError(f"unknown optimizer {name!r}: choose one of {known}")
    return kind


def read_by_optimizer(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without the optimizer keys its ``optimizer:`` does not read (which the
    spec refuses): for combining settings made for another optimizer, such as an n2p2
    ``input.nn``'s Kalman parameters (``InputNN.training_options()``) with ``optimizer:
    adam``."""
    reads = optimizer_kind(str(config.get("optimizer", DEFAULT_OPTIMIZER))).reads
    return {k: v for k, v in config.items() if k not in OPTIMIZER_KEYS or k in reads}
