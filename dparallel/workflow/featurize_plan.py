"""A featurize run's partitions: balanced by the work the index lets us estimate
(:func:`~dparallel.store.plan.estimated_work`), resuming a store planned by atoms alone;
a derived size bounded by what the descriptors hold per atom
(:func:`~dparallel.store.plan.task_bytes_per_atom`)."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.errors import DParallelError
from dparallel.io import UNITS
from dparallel.store import Plan, derived_partition_atoms, open_store, plan_partitions
from dparallel.store.plan import (
    MAX_PARTITION_ATOMS,
    WORKER_BYTES,
    compiled_pair_bytes,
    estimated_work,
    limit_for,
    memory_atoms,
    neighbours_per_atom,
    task_budget,
    task_bytes_per_atom,
    torch_pair_bytes,
)
from dparallel.workflow.featurize_failures import OPTION_NAMES

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.io import StructureSource
    from dparallel.io.location import Where

__all__ = [
    "featurize_plan",
    "featurize_target_atoms",
    "memory_warning",
    "partition_bytes",
    "structure_bytes",
    "task_bytes",
    "warn_task_memory",
]


def _index(source: StructureSource) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The source's atom counts (as planned: a broken frame's 0), cell volumes in Å³ (the
    index's are in the file's length unit) and periodic directions, as the estimates take
    them."""
    index, length = source.index, UNITS[source.units][0]  # Å per file length unit
    return source.atom_counts, index.volumes * length**3, index.periodic


def _work(source: StructureSource, r_cut: float) -> np.ndarray | None:
    """The source's structures' estimated work (None: even; plan by atoms); ``r_cut`` in Å."""
    return estimated_work(*_index(source), r_cut)


#: Columns of a pair's ∂G/∂r a function takes in the store, by its ``type`` (ACSF: radial
#: 2 one, angular 3 and 9 three); a type not named here has three.
_COLUMNS = {2: 1}


def _pair_bytes(name: str, descriptor: Any, derivatives: bool) -> tuple[int, float]:
    """Features per atom and the bytes a pair takes beside the neighbour list while
    ``descriptor`` (of the registered type ``name``) computes, each the largest over its
    centre (and neighbour) elements; (0, 0) for a type without ``features(element)``
    metadata. A feature is changed by
    neighbours of the elements its ``neighbors`` (ACSF) or ``neighbor`` (neighbor sums)
    names, else by every one; types with a numpy route take the compiled kernels' bytes
    (:func:`~dparallel.store.plan.compiled_pair_bytes`), the others the torch route's."""
    from dparallel.descriptors.registry import descriptor_kind

    if not callable(getattr(descriptor, "features", None)):
        return 0, 0.0
    elements = list(descriptor.elements)
    values, functions, columns = 0, 0, 0
    for e in elements:
        features = descriptor.features(e)
        names = [f.get("neighbors", [f["neighbor"]] if "neighbor" in f else None) for f in features]
        width = [_COLUMNS.get(f.get("type"), 3) for f in features]
        values = max(values, len(features))
        for f in elements:
            changed = [n is None or f in n for n in names]
            functions = max(functions, sum(changed))
            columns = max(columns, sum(w for w, c in zip(width, changed, strict=True) if c))
    kind = descriptor_kind(name)
    if kind.numpy_route is not None and kind.numpy_route():
        return values, compiled_pair_bytes(columns, derivatives)
    return values, torch_pair_bytes(functions, derivatives)


def _widths(descriptors: DescriptorSet) -> tuple[int, float]:
    """Features per atom and bytes a pair takes beside the list, of the whole set (its
    descriptors' arrays add up)."""
    found = [
        _pair_bytes(name, d, descriptors.derivatives)
        for name, d in descriptors.descriptors().items()
    ]
    return sum(v for v, _ in found), sum(p for _, p in found)


def task_bytes(source: StructureSource, descriptors: DescriptorSet) -> float:
    """A featurize task's estimated bytes per dense atom of ``source`` with ``descriptors``
    (:func:`~dparallel.store.plan.task_bytes_per_atom`; neighbours of the structure with
    the most: molecules alone count their own atoms, not a dense solid's)."""
    k, _ = neighbours_per_atom(*_index(source), descriptors.r_cut)
    most = float(k.max(initial=0.0))
    return float(task_bytes_per_atom(most, *_widths(descriptors)))


def partition_bytes(source: StructureSource, descriptors: DescriptorSet, plan: Plan) -> np.ndarray:
    """(P,) estimated bytes of each partition's task: its structures' atoms, each with the
    neighbours its structure's density gives (:func:`task_bytes` per structure)."""
    cum = np.concatenate([[0.0], np.cumsum(structure_bytes(source, descriptors))])  # (S + 1,)
    return cum[plan.stops] - cum[plan.starts]


def structure_bytes(source: StructureSource, descriptors: DescriptorSet) -> np.ndarray:
    """(S,) estimated bytes a featurize task takes for each structure: its atoms, each with
    the neighbours its density gives (:func:`task_bytes_per_atom`)."""
    counts, volumes, periodic = _index(source)
    k, _ = neighbours_per_atom(counts, volumes, periodic, descriptors.r_cut)  # (S,)
    return counts * task_bytes_per_atom(k, *_widths(descriptors))


def featurize_target_atoms(
    source: StructureSource,
    descriptors: DescriptorSet,
    n_workers: int | None,
    worker_bytes: float | None = None,
) -> int:
    """The derived partition size (:func:`derived_partition_atoms`) on the estimated work
    (``n_workers`` unknown: :data:`~dparallel.store.plan.MAX_PARTITION_ATOMS`), no larger
    than the atoms whose :func:`task_bytes` fit in :func:`task_budget` (a worker's memory
    limit ``worker_bytes``, where known)."""
    memory = memory_atoms(task_bytes(source, descriptors), task_budget(worker_bytes))
    if not n_workers:
        return min(MAX_PARTITION_ATOMS, memory)
    work = _work(source, descriptors.r_cut)
    return derived_partition_atoms(source.atom_counts, n_workers, work, memory)


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


def memory_warning(
    source: StructureSource,
    descriptors: DescriptorSet,
    plan: Plan,
    pending: list[int],
    limit: float,
    names: Mapping[str, str] | None = None,
) -> str | None:
    """What to tell a run whose largest ``pending`` partition's task needs more than a
    worker's memory ``limit`` (bytes) by :func:`partition_bytes` and
    :data:`~dparallel.store.plan.WORKER_BYTES` (its workers would be killed for memory on
    every attempt), else ``None``; ``names``: how the message names
    the options (featurize_failures' ``OPTION_NAMES`` keys) where the caller spells them
    otherwise."""
    if not pending or limit <= 0:
        return None
    need = partition_bytes(source, descriptors, plan)[pending]  # (pending,)
    worst = int(np.argmax(need))
    if need[worst] + WORKER_BYTES <= limit:
        return None
    n = {**OPTION_NAMES, **(names or {})}
    p, per_atom = pending[worst], task_bytes(source, descriptors)
    each = structure_bytes(source, descriptors)[plan.starts[p] : plan.stops[p]]
    big = int(np.argmax(each))
    if each[big] + WORKER_BYTES > limit:  # no partition size splits a structure
        s = int(plan.starts[p]) + big
        wanted = math.ceil(limit_for(each[big]) / 1e8) / 10
        return (
            f"structure {s} ({int(source.atom_counts[s]):,} atoms, in partition {p}) needs "
            f"an estimated {each[big] / 1e9:.1f} GB to featurize beside a worker's own "
            f"~{WORKER_BYTES / 1e9:.1f} GB, more than a worker's {limit / 1e9:.1f} GB memory "
            f"limit: its worker will likely be killed for memory, and no partition size "
            f"splits a structure: give each worker more memory ({n['memory_limit']}; "
            f"workers you start: `dask worker --memory-limit`), at least {wanted:.1f}GB by "
            "this estimate (docs/store-format.md)"
        )
    fits = memory_atoms(per_atom, task_budget(limit))
    return (
        f"partition {p} ({int(plan.atoms[p]):,} atoms) needs an estimated "
        f"{need[worst] / 1e9:.1f} GB to featurize ({per_atom / 1e3:.0f} kB per dense atom "
        f"with these descriptors) beside a worker's own ~{WORKER_BYTES / 1e9:.1f} GB, more "
        f"than a worker's {limit / 1e9:.1f} GB memory limit: its worker will likely be "
        f"killed for memory; partitions of at most {fits:,} atoms fit "
        f"({n['partition_atoms']} {fits}, with {n['overwrite']} where the store has "
        f"another size), or give each worker more memory ({n['memory_limit']})"
    )


def warn_task_memory(
    client: Any,
    source: StructureSource,
    descriptors: DescriptorSet,
    plan: Plan,
    pending: list[int],
    names: Mapping[str, str] | None = None,
) -> None:
    """Warn (:func:`memory_warning`) when the largest pending partition needs more memory
    than the smallest limit of the workers ``client``'s scheduler knows now."""
    from dparallel.cluster.expected import smallest_memory_limit

    limit = smallest_memory_limit(client)
    if limit is None:
        return
    text = memory_warning(source, descriptors, plan, pending, limit, names)
    if text:
        warnings.warn(text, stacklevel=4)
