"""Featurize a structure source into a store on a Dask cluster, partition by partition.

The unit of work is :func:`featurize_partition`: it reads its own structures from the
source by path, writes them into its slots, computes neighbor lists and descriptors
(ACSF and/or neighbor sums, optionally per-pair derivatives), writes them into its own
``parts/<p>/features/…`` group, marks itself done and returns a small JSON-able report
with mergeable statistics. :func:`featurize` plans, creates (or reopens, to resume) the
store, submits every pending partition, merges the statistics exactly and records them.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from dparallel.descriptors.acsf import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.errors import PartitionFailedError, StoreIncompleteError
from dparallel.io import StructureSource, open_source
from dparallel.store import Store, create_store, open_store
from dparallel.workflow.ingest import DEFAULT_PARTITION_ATOMS, ingest_config
from dparallel.workflow.plan import plan_partitions
from dparallel.workflow.stats import FeatureStats

__all__ = [
    "FeaturizeResult",
    "featurize",
    "featurize_in_process",
    "featurize_partition",
    "finish_featurize",
    "merged_statistics",
    "prepare_featurize",
    "read_partition_features",
    "write_scaling_data",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeaturizeResult:
    """Outcome of :func:`featurize`."""

    store: Store
    partitions_computed: int
    partitions_already_done: int
    n_structures: int
    n_atoms: int
    n_skipped: int
    seconds: float
    statistics: dict[str, dict[str, FeatureStats]] = field(repr=False)

    @property
    def structures_per_second(self) -> float:
        """Throughput of this run (structures of the partitions computed now)."""
        return self.n_structures / self.seconds if self.seconds > 0 else float("nan")


def featurize_config(
    source: StructureSource, descriptors: DescriptorSet, partition_atoms: int
) -> dict:
    """The config recorded in the store: a store is never mixed across configs."""
    config = ingest_config(source, partition_atoms)
    config["features"] = descriptors.to_dict()
    return config


def featurize_partition(
    source: StructureSource,
    store_path: str,
    p: int,
    descriptors: Mapping[str, Any],
    *,
    torch_threads: int | None = None,
    run: str = "",
) -> dict[str, Any]:
    """Compute and write partition ``p`` (idempotent; safe to retry); returns its report.

    Runs inside a Dask worker (or in-process). ``descriptors`` is
    :meth:`DescriptorSet.to_dict` so nothing but plain data crosses the wire.
    """
    from dparallel.cluster import ensure_torch_threads, tune_allocator
    from dparallel.cluster.events import publish_progress

    threads = ensure_torch_threads(torch_threads)
    tune_allocator()  # Dask workers start with malloc settings that slow array code down
    t0 = time.perf_counter()
    dset = DescriptorSet.from_dict(descriptors)
    store = open_store(store_path, mode="r+")
    start, stop = store.partition_range(p)
    checked = source.read_checked(start, stop)
    batch = checked.batch
    store.write_structures(p, batch, source_index=checked.indices)
    if checked.skipped:
        store.record_skipped(checked.skipped)
    t_read = time.perf_counter()
    computed = dset.compute(batch)
    t_compute = time.perf_counter()
    stats: dict[str, dict[str, FeatureStats]] = {}
    for name, per_element in computed.items():
        for element, arrays in per_element.items():
            store.write_partition_arrays(p, arrays, group=f"features/{name}/{element}")
            values = arrays["values"].astype(np.float64, copy=False)
            stats.setdefault(name, {})[element] = FeatureStats.of(values)
    seconds = time.perf_counter() - t0
    report = {
        "partition": int(p),
        "n_structures": batch.n_structures,
        "n_atoms": batch.n_atoms,
        "n_skipped": len(checked.skipped),
        "seconds": round(seconds, 6),
        "seconds_read": round(t_read - t0, 6),
        "seconds_compute": round(t_compute - t_read, 6),
        "seconds_write": round(time.perf_counter() - t_compute, 6),
        "torch_threads": threads,
        "pid": os.getpid(),
        "stats": {
            name: {elem: s.to_json() for elem, s in per_elem.items()}
            for name, per_elem in stats.items()
        },
    }
    store.mark_done(p, report)  # last write: the partition is complete from here on
    publish_progress(run, p, batch.n_structures, batch.n_atoms, seconds)
    return report


def merged_statistics(store: Store) -> dict[str, dict[str, FeatureStats]]:
    """Merge every done partition's statistics exactly (order-independent)."""
    merged: dict[str, dict[str, FeatureStats]] = {}
    for p in store.done_partitions().tolist():
        report = store.report(p) or {}
        for name, per_elem in report.get("stats", {}).items():
            for elem, data in per_elem.items():
                part = FeatureStats.from_json(data)
                slot = merged.setdefault(name, {})
                slot[elem] = slot[elem].merge(part) if elem in slot else part
    return merged


def prepare_featurize(
    source_path: str | os.PathLike[str],
    store_path: str | os.PathLike[str],
    descriptors: DescriptorSet,
    *,
    format: str | None = None,
    units: str = "ase",
    on_error: Literal["raise", "skip"] = "raise",
    partition_atoms: int = DEFAULT_PARTITION_ATOMS,
    overwrite: bool = False,
) -> tuple[StructureSource, Store]:
    """Index the source, plan partitions and create (or reopen, to resume) the store."""
    source = open_source(source_path, format, units=units, on_error=on_error)
    plan = plan_partitions(source.atom_counts, partition_atoms)
    store = create_store(
        store_path,
        source_fingerprint=source.fingerprint(),
        atom_counts=source.atom_counts,
        plan=plan,
        config=featurize_config(source, descriptors, partition_atoms),
        overwrite=overwrite,
    )
    return source, store


def finish_featurize(
    store_path: str | os.PathLike[str],
) -> tuple[Store, dict[str, dict[str, FeatureStats]]]:
    """Merge the done partitions' statistics exactly and record them in the store."""
    store = open_store(store_path, mode="r+")
    statistics = merged_statistics(store)
    store.update_attrs({"statistics": _statistics_json(statistics)})
    return store, statistics


def featurize_in_process(
    source_path: str | os.PathLike[str],
    store_path: str | os.PathLike[str],
    descriptors: DescriptorSet,
    **options: Any,
) -> Store:
    """Featurize in this process, partition by partition, without Dask (same store).

    For small jobs, tests and benchmarks; ``options`` as :func:`prepare_featurize`.
    """
    source, store = prepare_featurize(source_path, store_path, descriptors, **options)
    for p in store.pending_partitions().tolist():
        featurize_partition(source, os.fspath(store_path), p, descriptors.to_dict())
    return finish_featurize(store_path)[0]


def featurize(
    source_path: str | os.PathLike[str],
    store_path: str | os.PathLike[str],
    descriptors: DescriptorSet,
    *,
    format: str | None = None,
    units: str = "ase",
    on_error: Literal["raise", "skip"] = "raise",
    partition_atoms: int = DEFAULT_PARTITION_ATOMS,
    overwrite: bool = False,
    client: Any = None,
    cluster: Any = None,
    scheduler: str | None = None,
    scheduler_file: str | os.PathLike[str] | None = None,
    torch_threads: int | None = None,
    retries: int = 1,
    progress: Callable[[dict[str, Any], int, int], None] | None = None,
    on_connect: Callable[[Any], None] | None = None,
) -> FeaturizeResult:
    """Featurize ``source_path`` into ``store_path`` on a Dask cluster; resumable.

    Parameters
    ----------
    source_path, format, units, on_error
        The structure file, read by :func:`dparallel.io.open_source` inside each task.
    store_path
        Zarr store to create, or to resume when it was made with the same source and config.
    descriptors
        What to compute (:class:`DescriptorSet`).
    partition_atoms
        Atoms per partition (one task each).
    overwrite
        Replace a store made from another source or config instead of refusing.
    client, cluster, scheduler, scheduler_file
        Where to run; see :func:`dparallel.cluster.connect` for the resolution order
        (default: a local multi-process cluster).
    torch_threads
        Torch threads inside each task (default: the worker's budget, 1).
    retries
        Extra attempts of a partition whose task raised.
    progress
        ``progress(report, done, total)`` after each partition finishes.
    on_connect
        Called with the :class:`~dparallel.cluster.ClusterHandle` once connected
        (the CLI prints the dashboard link from it).

    Raises
    ------
    PartitionFailedError
        Some partitions kept failing (or killing their workers); names them and their
        structures. Every other partition is kept, so a rerun computes only those.
    """
    from distributed import as_completed, wait

    from dparallel.cluster import connect
    from dparallel.cluster.events import publish_progress_start

    t0 = time.perf_counter()
    source, store = prepare_featurize(
        source_path,
        store_path,
        descriptors,
        format=format,
        units=units,
        on_error=on_error,
        partition_atoms=partition_atoms,
        overwrite=overwrite,
    )
    pending = [int(p) for p in store.pending_partitions()]
    already = store.n_partitions - len(pending)
    n_structures = n_atoms = n_skipped = 0
    failures: dict[int, BaseException] = {}
    if pending:
        run = f"featurize:{os.fspath(store_path)}"
        spec = descriptors.to_dict()
        with connect(
            cluster, client=client, scheduler=scheduler, scheduler_file=scheduler_file
        ) as handle:
            if on_connect is not None:
                on_connect(handle)
            publish_progress_start(
                run,
                len(pending),
                int((store.plan.stops[pending] - store.plan.starts[pending]).sum()),
                target=handle.client,
            )

            def submit(p: int) -> Any:
                return handle.client.submit(
                    featurize_partition,
                    source,
                    os.fspath(store_path),
                    p,
                    spec,
                    torch_threads=torch_threads,
                    run=run,
                    key=f"dparallel-featurize-{p}-{os.getpid()}-{time.time_ns()}",
                    pure=False,
                    retries=retries,
                )

            done = 0

            def collect(future: Any, p: int) -> None:
                nonlocal done, n_structures, n_atoms, n_skipped
                if future.status != "finished":
                    failures[p] = future.exception()
                    log.warning("partition %d failed: %s", p, failures[p])
                    return
                failures.pop(p, None)
                report = future.result()
                done += 1
                n_structures += report["n_structures"]
                n_atoms += report["n_atoms"]
                n_skipped += report["n_skipped"]
                if progress is not None:
                    progress(report, done, len(pending))

            futures = {submit(p): p for p in pending}
            for future in as_completed(futures):
                collect(future, futures.pop(future))
            # A worker that dies takes the tasks queued on it down too, and the scheduler
            # counts them all as suspects. Rerun every KilledWorker partition alone, one at
            # a time: an innocent one finishes, the one that kills its worker fails again.
            for p in sorted(p for p, exc in failures.items() if _killed_worker(exc)):
                future = submit(p)
                wait(future)
                collect(future, p)
    store, statistics = finish_featurize(store_path)
    if failures:
        raise PartitionFailedError(_failure_message(store, failures))
    return FeaturizeResult(
        store=store,
        partitions_computed=len(pending),
        partitions_already_done=already,
        n_structures=n_structures,
        n_atoms=n_atoms,
        n_skipped=n_skipped,
        seconds=time.perf_counter() - t0,
        statistics=statistics,
    )


def _statistics_json(statistics: dict[str, dict[str, FeatureStats]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, per_elem in statistics.items():
        out[name] = {}
        for elem, s in per_elem.items():
            out[name][elem] = {
                "count": s.count,
                "min": s.minimum.tolist(),
                "max": s.maximum.tolist(),
                "mean": s.mean.tolist(),
                "sigma": s.sigma.tolist(),
            }
    return out


def _failure_message(store: Store, failures: Mapping[int, BaseException]) -> str:
    lines = []
    for p, exc in sorted(failures.items()):
        start, stop = store.partition_range(p)
        lines.append(
            f"partition {p} (structures {start}..{stop - 1}) failed: {type(exc).__name__}: {exc}"
        )
    kept = int(store.done_partitions().sum())
    return (
        f"{len(failures)} of {store.n_partitions} partitions failed; {kept} done partitions are "
        "kept and a rerun computes only the rest.\n" + "\n".join(lines)
    )


def write_scaling_data(
    store: Store,
    path: str | os.PathLike[str],
    descriptor: str = "acsf",
    statistics: Mapping[str, Mapping[str, FeatureStats]] | None = None,
) -> None:
    """Write n2p2 ``scaling.data`` for ``descriptor`` (elements ordered by atomic number,
    each element's rows in n2p2's sorted order whatever the store's column order).

    ``statistics`` (e.g. ``FeaturizeResult.statistics``) saves re-reading every
    partition's report; by default they are merged from the store.
    """
    from ase.data import atomic_numbers

    from dparallel.workflow.stats import format_scaling_data

    if statistics is None:
        statistics = merged_statistics(store)
    merged = statistics.get(descriptor)
    if not merged:
        raise StoreIncompleteError(f"{store.path} has no '{descriptor}' statistics to write")
    elements = sorted(merged, key=lambda symbol: atomic_numbers[symbol])
    spec = store.attrs.get("config", {}).get("features", {}).get(descriptor)
    orders = None
    if descriptor == "acsf" and spec:  # n2p2 reads rows in its sorted order
        acsf = ACSF.from_dict(spec)
        orders = [acsf.n2p2_order(e) for e in elements]
    with open(path, "w") as handle:
        handle.write(format_scaling_data([merged[e] for e in elements], orders))


def read_partition_features(
    store: Store, p: int, descriptor: str = "acsf"
) -> dict[str, dict[str, np.ndarray]]:
    """Stored arrays of partition ``p`` for ``descriptor``, by central element.

    Each element maps to ``values``, ``atom_index`` (local atom rows of the partition)
    and, with derivatives, ``d/<F>/<name>`` per neighbour element F
    (docs/store-format.md). Elements absent from the partition are left out.
    """
    spec = DescriptorSet.from_dict(store.attrs["config"]["features"]).descriptors()
    if descriptor not in spec:
        raise StoreIncompleteError(f"{store.path} has no '{descriptor}' features")
    elements = list(spec[descriptor].elements)
    out: dict[str, dict[str, np.ndarray]] = {}
    for element in elements:
        arrays = store.read_partition_arrays(p, group=f"features/{descriptor}/{element}")
        if not arrays:
            continue
        for neighbor in elements:
            block = store.read_partition_arrays(
                p, group=f"features/{descriptor}/{element}/d/{neighbor}"
            )
            arrays.update({f"d/{neighbor}/{name}": value for name, value in block.items()})
        out[element] = arrays
    return out


def _killed_worker(exc: BaseException | None) -> bool:
    """Whether the scheduler gave up on a task because its workers kept dying."""
    from distributed.scheduler import KilledWorker

    return isinstance(exc, KilledWorker)
