"""The featurize task: one partition, inside a Dask worker (or in-process).

:func:`featurize_partition` reads its structures, computes one neighbor list and the
descriptors, writes them into its own region of the store, marks itself done and returns
a small JSON-able report with mergeable statistics.

A structure the descriptors cannot take is found here, per structure: an element outside
the descriptor set, two atoms at the same place, or anything else that makes the
computation raise or return non-finite numbers. It is named by file, index in the file
and line; with ``on_error="skip"`` only that structure is skipped (recorded like every
other skip), otherwise the partition fails with that message.

Where it computes: a worker advertising the Dask resource ``GPU``
(:mod:`dparallel.cluster.gpus`) computes on ``"cuda"`` through the first engine of
:data:`DEVICE_ENGINES` that takes the descriptor set (today ACSF on the Triton kernel,
:func:`triton_descriptors`), which must return :func:`task_descriptors`'s arrays; without
a usable CUDA device or an engine it computes on the CPU, logging why once.

This module is what workers import: it loads neither the client driver nor bokeh.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.errors import BackendUnavailableError, DescriptorError, InvalidStructureError
from dparallel.neighbors import neighbor_list
from dparallel.neighbors.coincident import coincident_atoms
from dparallel.store import open_store
from dparallel.store._derivatives import DERIVATIVE_DTYPE
from dparallel.store.stats import statistics_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from dparallel.io import StructureSource
    from dparallel.io.location import Location
    from dparallel.neighbors import Neighbors
    from dparallel.store import Store
    from dparallel.types import StructureBatch

__all__ = [
    "DEVICE_ENGINES",
    "device_descriptors",
    "featurize_partition",
    "recorded_report",
    "task_descriptors",
    "task_device",
    "triton_descriptors",
    "unfit_structures",
]

log = logging.getLogger(__name__)
#: dG/dr straight from the kernel in the precision the store keeps (half the bytes to
#: write and encode than float64, rounded once either way).
STORED_DERIVATIVES = str(DERIVATIVE_DTYPE)

_Computed = dict[str, dict[str, dict[str, np.ndarray]]]


#: Why a structure cannot be featurized, and the atom (its index in it) that shows it.
_Unfit = tuple[str, int | None]


def _elements_outside(batch: StructureBatch, dset: DescriptorSet) -> dict[int, _Unfit]:
    """Structures with an element some descriptor of ``dset`` does not define: the reason
    and the first such atom (its index in the structure)."""
    from ase.data import atomic_numbers, chemical_symbols

    out: dict[int, _Unfit] = {}
    for name, descriptor in dset.descriptors().items():
        known = np.zeros(max(atomic_numbers.values()) + 1, bool)
        known[[atomic_numbers[e] for e in descriptor.elements]] = True
        numbers = np.clip(batch.numbers, 0, known.shape[0] - 1)
        rows = np.flatnonzero(~known[numbers])
        for s in np.unique(batch.structure_index[rows]):
            local = rows[batch.structure_index[rows] == s]
            symbols = sorted({chemical_symbols[int(z)] for z in batch.numbers[local]})
            atom = int(local[0] - batch.offsets[s])
            out.setdefault(
                int(s),
                (
                    f"atom {atom}: element {', '.join(symbols)} is not in the {name} elements "
                    f"({', '.join(descriptor.elements)})",
                    atom,
                ),
            )
    return out


def _finite_rows(a: np.ndarray) -> np.ndarray:
    """Rows of ``a`` (n, …) whose entries are all finite."""
    return np.isfinite(a).all(axis=tuple(range(1, a.ndim)))


def _all_finite(a: np.ndarray) -> bool:
    """Whether every entry of ``a`` is finite, by one sum (much faster than
    :func:`_finite_rows` on dG/dr): NaN or ±inf anywhere makes it non-finite; an overflow of
    finite entries only sends the caller to the exact per-row test."""
    return bool(np.isfinite(np.add.reduce(a, axis=None)))


#: Per-pair derivative arrays and their pair axis: (P, F, 3) or the split (F_r + 3 F_a, P).
_PER_PAIR = {"dG_dr": 0, "dG_dr_split": 1}


def _non_finite(batch: StructureBatch, computed: _Computed) -> dict[int, str]:
    """Structures whose descriptors (or derivatives) came out NaN or infinite."""
    out: dict[int, str] = {}
    for name, per_element in computed.items():
        for element, arrays in per_element.items():
            values = arrays["values"]
            atoms = arrays["atom_index"][:0]
            if not _all_finite(values):
                atoms = arrays["atom_index"][~_finite_rows(values)]
            for key, value in arrays.items():
                leaf = key.rsplit("/", 1)[-1]
                if key.startswith("d/") and leaf in _PER_PAIR and not _all_finite(value):
                    pairs = ~_finite_rows(np.moveaxis(value, _PER_PAIR[leaf], 0))
                    first = arrays[key.removesuffix(leaf) + "pair_first"][pairs]
                    atoms = np.concatenate([atoms, first])
            for s in np.unique(batch.structure_index[atoms.astype(np.int64)]):
                out.setdefault(int(s), f"{name} features of {element} atoms are not finite")
    return out


def unfit_structures(batch: StructureBatch, dset: DescriptorSet, nb: Neighbors) -> dict[int, str]:
    """``{structure in batch: reason}`` for structures ``dset`` cannot featurize (cheap checks)."""
    return {s: reason for s, (reason, _) in _unfit(batch, dset, nb).items()}


def _unfit(batch: StructureBatch, dset: DescriptorSet, nb: Neighbors) -> dict[int, _Unfit]:
    """:func:`unfit_structures` with the atom each reason names, where one does."""
    found = _elements_outside(batch, dset)
    for s, reason in coincident_atoms(batch, nb.pair_first, nb.pair_second, nb.distances).items():
        found.setdefault(s, (reason, None))
    return dict(sorted(found.items()))


def triton_descriptors(
    batch: StructureBatch, dset: DescriptorSet, neighbors: Neighbors, device: str
) -> dict[str, dict[str, dict[str, np.ndarray]]] | None:
    """``task_descriptors(batch, dset, neighbors)``'s arrays (same keys, dtypes, shapes and
    pair order) computed by the Triton ACSF kernel on ``device``; ``None`` (the CPU then
    computes) for a set other than ACSF alone on the compiled kernel, a device the kernel
    cannot run on, or a partition too large for the device's memory (logged)."""
    from dparallel.descriptors import ACSF, Backend
    from dparallel.descriptors._acsf_backends import triton_runs_on

    (descriptor, *others) = dset.by_name.values()
    # ACSF alone, computed on the CPU by the compiled kernel: the layout reproduced here
    if others or not isinstance(descriptor, ACSF) or dset.uses_torch or not triton_runs_on(device):
        return None
    import torch

    try:
        return dset.compute(
            batch, neighbors, str(DERIVATIVE_DTYPE), True, Backend("triton", device=device)
        )
    except (BackendUnavailableError, torch.cuda.OutOfMemoryError) as exc:
        log.warning("Triton ACSF on %r: %s: featurizing this partition on the CPU", device, exc)
        return None


#: ``{name: engine}``; ``engine(batch, dset, neighbors, device)`` returns the set's store
#: arrays computed on ``device``, or ``None`` when it cannot take this set (the next engine
#: is asked; none: the CPU).
DEVICE_ENGINES: dict[
    str, Callable[[StructureBatch, DescriptorSet, Neighbors, str], dict[str, Any] | None]
] = {"triton": triton_descriptors}

_said: set[str] = set()


def _once(message: str, *args: Any) -> None:
    """Log ``message`` at warning level once per worker process."""
    text = message % args
    if text not in _said:
        _said.add(text)
        log.warning(text)


def task_device() -> str:
    """``"cuda"`` on a GPU worker whose CUDA device torch sees, else ``"cpu"``."""
    from dparallel.cluster.gpus import worker_gpus

    if worker_gpus() <= 0:
        return "cpu"
    try:
        import torch

        available = bool(torch.cuda.is_available())
    except ImportError:
        available = False
    if not available:
        _once(
            "GPU worker (Dask resource GPU) without a usable CUDA device "
            "(CUDA_VISIBLE_DEVICES=%r): featurizing on the CPU",
            os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
        return "cpu"
    return "cuda"


def device_descriptors(
    batch: StructureBatch, dset: DescriptorSet, neighbors: Neighbors, device: str
) -> dict[str, Any] | None:
    """The store arrays of ``dset`` computed on ``device`` by the first engine of
    :data:`DEVICE_ENGINES` that takes the set; ``None`` (logged once): compute on the CPU."""
    for engine in DEVICE_ENGINES.values():
        found = engine(batch, dset, neighbors, device)
        if found is not None:
            return found
    _once(
        "no featurize engine for %s on %r registered (dparallel.workflow.featurize_task."
        "DEVICE_ENGINES): computing on the CPU",
        ", ".join(dset.by_name),
        device,
    )
    return None


def task_descriptors(
    batch: StructureBatch, dset: DescriptorSet, nb: Neighbors | None = None, device: str = "cpu"
) -> _Computed:
    """``dset.compute`` as the store keeps it (dG/dr in float32, ACSF's already split), on
    ``device`` through a registered engine when one takes the set, else on the CPU."""
    if device != "cpu":
        if nb is None:
            nb = neighbor_list(batch, dset.r_cut)
        found = device_descriptors(batch, dset, nb, device)
        if found is not None:
            return found
    return dset.compute(
        batch, neighbors=nb, derivative_dtype=STORED_DERIVATIVES, split_derivatives=True
    )


def _compute_each(batch: StructureBatch, dset: DescriptorSet) -> dict[int, str]:
    """After a failure of the whole batch: compute structure by structure, keep who fails."""
    out: dict[int, str] = {}
    for s in range(batch.n_structures):
        one = batch.select(s, s + 1)
        try:
            found = _non_finite(one, task_descriptors(one, dset))
        except Exception as exc:  # noqa: BLE001 - any kernel failure is this structure's
            out[s] = f"the descriptors cannot be computed: {type(exc).__name__}: {exc}"
            continue
        if found:
            out[s] = found[0]
    return out


def _compute(
    source: StructureSource,
    batch: StructureBatch,
    indices: np.ndarray,
    dset: DescriptorSet,
    device: str = "cpu",
) -> tuple[StructureBatch, np.ndarray, _Computed, list[tuple[int, str]]]:
    """Descriptors of every structure the set can take; the others raise or are skipped."""
    skipped: list[tuple[int, str]] = []
    while True:
        nb = neighbor_list(batch, dset.r_cut)
        bad = _unfit(batch, dset, nb)
        computed: _Computed = {}
        if not bad:
            try:
                computed = task_descriptors(batch, dset, nb, device)
                bad = {s: (why, None) for s, why in _non_finite(batch, computed).items()}
                if len(bad) == batch.n_structures > 1:
                    first = int(indices[0])
                    raise DescriptorError(
                        f"the descriptors of all {batch.n_structures} structures of this "
                        f"partition come out NaN or infinite (from structure {first} of "
                        f"{source.path} on): not one structure's fault; check the "
                        "descriptor parameters"
                    )
            except DescriptorError:
                raise
            except Exception:
                bad = {s: (why, None) for s, why in _compute_each(batch, dset).items()}
                if not bad or (len(bad) == batch.n_structures > 1):
                    raise  # not one structure's fault (none, or all fail): the partition fails
        if not bad:
            return batch, indices, computed, skipped
        for s, (reason, atom) in bad.items():
            index = int(indices[s])
            line = source.line_of(index, atom)  # the atom's own line where the file has one
            if source.on_error == "raise":
                raise InvalidStructureError(
                    reason, path=source.path, line=line or None, frame=index
                )
            skipped.append((index, f"line {line}: {reason}" if line else reason))
        keep = np.asarray([s not in bad for s in range(batch.n_structures)])
        batch = batch.concatenate([batch.select(int(s), int(s) + 1) for s in np.flatnonzero(keep)])
        indices = indices[keep]


def recorded_report(store: Store, p: int) -> dict[str, Any] | None:
    """Partition ``p``'s report as its task recorded it, once the partition is done, else
    ``None``: what a task rerun by Dask returns (its held result went with a worker that
    left, or was retired while running it) and what the driver takes when a task's own
    result was lost with its worker."""
    return store.report(p) if store.is_done(p) else None


def featurize_partition(
    source: StructureSource,
    store_path: str | Location,
    p: int,
    descriptors: Mapping[str, Any],
    *,
    torch_threads: int | None = None,
    install: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Compute and write partition ``p`` (idempotent; safe to retry); returns its report.
    A partition already done returns its recorded report, computing nothing
    (:func:`recorded_report`).

    Runs inside a Dask worker (or in-process). ``descriptors`` is
    :meth:`DescriptorSet.to_dict` so nothing but plain data crosses the wire. ``install``:
    the client's :func:`~dparallel.cluster.installs.installed`; a worker whose own differs
    (one that joined the cluster after the client checked it) refuses the task.

    Raises
    ------
    InputFormatError, InvalidStructureError
        A structure of the partition is malformed or cannot be featurized and the source
        reads with ``on_error="raise"``; the message names file, structure index and line.
    """
    from dparallel.cluster import configured_torch_threads, tune_allocator
    from dparallel.cluster import torch_threads as thread_budget

    if install is not None:
        from dparallel.cluster.installs import refuse_other_install

        refuse_other_install(install)  # before anything is computed or written
    tune_allocator()  # Dask workers start with malloc settings that slow array code down
    started = time.time()
    t0 = time.perf_counter()
    dset = DescriptorSet.from_dict(descriptors)
    if dset.uses_torch:  # the task's budget; the thread's own (a caller's, a user's worker's) after
        with thread_budget(torch_threads) as threads:
            return _run_partition(source, store_path, p, dset, threads, (started, t0))
    # compiled ACSF on numpy: torch (slow to import, per worker) is not loaded at all
    threads = configured_torch_threads() if torch_threads is None else int(torch_threads)
    return _run_partition(source, store_path, p, dset, threads, (started, t0))


def _run_partition(
    source: StructureSource,
    store_path: str | Location,
    p: int,
    dset: DescriptorSet,
    threads: int,
    clock: tuple[float, float],
) -> dict[str, Any]:
    """:func:`featurize_partition`'s work once its thread budget is set; ``clock``: when the
    task started (wall clock, perf counter)."""
    from dparallel.cluster.secede import outside_the_pool
    from dparallel.dashboard.events import worker_name

    started, t0 = clock
    device = task_device()  # "cuda" on a GPU worker with a CUDA device
    store = open_store(store_path, mode="r+")
    if (done := recorded_report(store, p)) is not None:
        return done
    start, stop = store.partition_range(p)
    checked = source.read_checked(start, stop)
    t_read = time.perf_counter()
    batch, indices, computed, unfit = _compute(source, checked.batch, checked.indices, dset, device)
    skipped = sorted([*checked.skipped, *unfit])
    t_compute = time.perf_counter()
    stats = {
        name: {element: found.to_json() for element, found in per_element.items()}
        for name, per_element in statistics_of(computed).items()
    }
    # at a URL the writes mostly wait for the service: the worker's next task runs meanwhile
    with outside_the_pool(enabled=not store.is_local) as waited:
        store.write_structures(p, batch, source_index=indices)
        if skipped:
            store.record_skipped(skipped)
        store.write_features(p, computed)
        seconds = time.perf_counter() - t0 - waited  # the task's own time: no slot wait
        report = {
            "partition": int(p),
            "n_structures": batch.n_structures,
            "n_atoms": batch.n_atoms,
            "n_skipped": len(skipped),
            "seconds": round(seconds, 6),
            "seconds_read": round(t_read - t0, 6),
            "seconds_compute": round(t_compute - t_read, 6),
            "seconds_write": round(time.perf_counter() - t_compute - waited, 6),
            "seconds_waiting": round(waited, 6),  # for a slot to write outside the pool
            "started": started,  # wall clock (s since the epoch): the run's timeline
            "torch_threads": threads,
            "device": device,
            "pid": os.getpid(),
            "worker": worker_name(),  # the driver publishes the report under it
            "stats": stats,
        }
        store.mark_done(p, report)  # last write: the partition is complete from here on
    return report
