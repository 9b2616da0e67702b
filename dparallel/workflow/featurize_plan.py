"""A featurize run's partitions: balanced by the work the index lets us estimate
(:func:`~dparallel.store.plan.estimated_work`), resuming a store planned by atoms alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dparallel.errors import DParallelError
from dparallel.io import UNITS
from dparallel.store import Plan, derived_partition_atoms, open_store, plan_partitions
from dparallel.store.plan import estimated_work

if TYPE_CHECKING:
    import numpy as np

    from dparallel.io import StructureSource
    from dparallel.io.location import Where

__all__ = ["featurize_plan", "featurize_target_atoms"]


def _work(source: StructureSource, r_cut: float) -> np.ndarray | None:
    """The source's structures' estimated work (None: even; plan by atoms); the index's
    volumes are in the file's length unit, ``r_cut`` in Å."""
    index, length = source.index, UNITS[source.units][0]  # Å per file length unit
    return estimated_work(index.counts, index.volumes * length**3, index.periodic, r_cut)


def featurize_target_atoms(source: StructureSource, r_cut: float, n_workers: int) -> int:
    """The derived partition size (:func:`derived_partition_atoms`) on the estimated work."""
    return derived_partition_atoms(source.atom_counts, n_workers, _work(source, r_cut))


def featurize_plan(
    source: StructureSource, atoms: int, r_cut: float, store_path: Where | None = None
) -> Plan:
    """Partitions of ``source`` of ``atoms`` dense atoms' work each (neighbours within
    ``r_cut``); where a store at ``store_path`` was planned by atoms alone (before the
    estimate, or where it is even), that plan, so the store resumes."""
    work = _work(source, r_cut)
    plan = plan_partitions(source.atom_counts, atoms, work)
    if work is None or store_path is None:
        return plan
    by_atoms = plan_partitions(source.atom_counts, atoms)
    try:
        recorded = open_store(store_path).plan
    except (DParallelError, OSError, KeyError, ValueError):  # none there, or not a store
        return plan
    return by_atoms if recorded == by_atoms else plan
