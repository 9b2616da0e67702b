"""Featurize a structure source into a store on a Dask cluster: the client driver.

:func:`featurize` takes the store's lease, plans, creates (or reopens, to resume) the
store, runs every pending partition (:mod:`~dparallel.workflow.featurize_task`) on the
cluster, merges the statistics exactly and records them. :func:`featurize_status` is the
predicate ``dparallel run`` uses to decide whether a store is already current.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dparallel.descriptors.registry import descriptor_kind
from dparallel.errors import (
    ArgumentTypeError,
    RunInterruptedError,
    StoreIncompleteError,
    StoreMismatchError,
    UnsafePathError,
)
from dparallel.io import open_source
from dparallel.store import (
    Store,
    StoreLease,
    StoreStatus,
    create_store,
    open_store,
    publish_store,
    refuse_foreign_target,
    store_status,
    target_path,
)
from dparallel.store.plan import MIN_SPLIT_ATOMS, given_partition_atoms
from dparallel.store.stats import summaries
from dparallel.workflow.featurize_failures import raise_failures
from dparallel.workflow.featurize_plan import (
    featurize_plan,
    featurize_target_atoms,
    warn_task_memory,
)
from dparallel.workflow.featurize_task import featurize_partition, recorded_report
from dparallel.workflow.featurize_worker_preload import featurize_connect_options
from dparallel.workflow.ingest import ingest_config, open_options, repair

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from concurrent.futures import Future

    from dparallel.cluster import ClusterHandle
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.io import StructureSource
    from dparallel.io.location import Where
    from dparallel.store import Plan
    from dparallel.store.stats import FeatureStats

__all__ = [
    "FeaturizeOptions",
    "FeaturizeResult",
    "featurize",
    "featurize_in_process",
    "featurize_partition",
    "featurize_status",
    "finish_featurize",
    "prepare_featurize",
    "write_scaling_data",
]


@dataclass(frozen=True)
class FeaturizeOptions:
    """How :func:`featurize` reads, stores and runs.

    ``format``, ``units``, ``on_error``, ``energy_key``, ``forces_key``: how each task
    reads the structure file (:func:`dparallel.io.open_source`); with ``on_error="skip"``
    structures that cannot be read or featurized are skipped and recorded, with
    ``"raise"`` their partition fails, naming them. ``partition_atoms``: atoms per
    partition (one task each); ``None``: about four partitions per worker, 5,000-20,000
    atoms each, or one per worker (≥ 1,000 atoms) for less data
    (:func:`~dparallel.store.derived_partition_atoms`; a warning when there are fewer
    partitions than workers), and a store of this source and config is resumed
    whatever its partitioning. ``overwrite``: replace a dparallel store made from another
    source or config instead of refusing (never anything that is not a dparallel store).
    ``repair``: verify a store being resumed (``dparallel info --verify``) and compute its
    damaged done partitions again. ``protect``: files besides the source that the store
    path may not be or hold.
    ``client``, ``cluster``, ``scheduler``, ``scheduler_file``: where to run
    (:func:`dparallel.cluster.connect`; default: a local multi-process cluster);
    ``connecting``: a connection already being made for this run
    (:func:`dparallel.cluster.connect_in_background`), used instead and closed at the end
    either way. ``torch_threads``: torch threads inside each task (default: the worker's
    budget, 1); ``retries``: extra attempts of a partition whose task raised.
    ``progress(event, done, total)``: once with the dashboard's start event (``done=0``),
    then with each finished partition's report; ``on_connect(handle)`` once connected.
    ``option_names``: how messages name ``overwrite`` and ``partition_atoms`` where the
    caller spells them otherwise (``dparallel run``: its workflow keys).
    """

    format: str | None = None
    units: str = "ase"
    on_error: Literal["raise", "skip"] = "raise"
    energy_key: str | None = None
    forces_key: str | None = None
    partition_atoms: int | None = None
    overwrite: bool = False
    repair: bool = False
    protect: tuple[str | os.PathLike[str], ...] = ()
    client: Any = None
    cluster: Any = None
    scheduler: str | None = None
    scheduler_file: str | os.PathLike[str] | None = None
    torch_threads: int | None = None
    retries: int = 1
    progress: Callable[[dict[str, Any], int, int], None] | None = field(default=None, compare=False)
    on_connect: Callable[[Any], None] | None = field(default=None, compare=False)
    connecting: Future[ClusterHandle] | None = field(default=None, compare=False)
    option_names: Mapping[str, str] = field(default_factory=dict, compare=False)

    def connect_to(self) -> dict[str, Any]:
        """Keyword arguments for :func:`dparallel.cluster.connect` (and
        :func:`~dparallel.cluster.expected_workers`): where to run."""
        return {
            "spec": self.cluster,
            "client": self.client,
            "scheduler": self.scheduler,
            "scheduler_file": self.scheduler_file,
        }


_DEFAULTS = FeaturizeOptions()
_PARTITION_ATOMS = "partition_atoms (--partition-atoms)"  # as the API and `featurize` name it


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


def _check_arguments(call: str, descriptors: object, options: object) -> None:
    """A ``TypeError`` naming ``call``'s argument that is not of its type (a descriptors
    file's path or a mapping given for ``descriptors``, a mapping for ``options``)."""
    from dparallel.descriptors.descriptor_set import DescriptorSet

    if not isinstance(descriptors, DescriptorSet):
        raise ArgumentTypeError(
            f"{call}: descriptors is a {type(descriptors).__name__}, not a DescriptorSet (a "
            "descriptors file: dparallel.workflow.descriptors_spec.load_descriptors(path))"
        )
    if not isinstance(options, FeaturizeOptions):
        raise ArgumentTypeError(
            f"{call}: options is a {type(options).__name__}, not a FeaturizeOptions "
            "(FeaturizeOptions(**...))"
        )


def _target(
    source_path: Where,
    descriptors: DescriptorSet,
    options: FeaturizeOptions,
    n_workers: int | None = None,
    store_path: Where | None = None,
    worker_bytes: float | None = None,
) -> tuple[StructureSource, Plan, dict[str, Any]]:
    """The source, plan and config (recorded in the store) a store for these options is
    made from; without ``partition_atoms`` the size is derived from the data and
    ``n_workers`` (unknown workers: the largest size a task's memory, within a worker's
    limit ``worker_bytes`` where known, allows) and recorded like a given one."""
    name = options.option_names.get("partition_atoms") or _PARTITION_ATOMS
    atoms = given_partition_atoms(options.partition_atoms, name)  # before the source is read
    source = open_source(source_path, options.format, **open_options(options))
    given = atoms is not None
    if atoms is None:
        atoms = featurize_target_atoms(source, descriptors, n_workers, worker_bytes)
    config = {**ingest_config(source, atoms), "features": descriptors.to_dict()}
    plan = featurize_plan(source, atoms, descriptors.r_cut, store_path if given else None)
    return source, plan, config


def featurize_status(
    source_path: Where,
    store_path: Where,
    descriptors: DescriptorSet,
    options: FeaturizeOptions = _DEFAULTS,
) -> StoreStatus:
    """What :func:`featurize` with these options would find at ``store_path``: the
    comparison :func:`~dparallel.store.create_store` makes (the partitioning only when
    ``options.partition_atoms`` is given). ``status.current`` plus the recorded
    ``statistics`` means a run would have nothing to do."""
    _check_arguments("featurize_status", descriptors, options)
    source, plan, config = _target(source_path, descriptors, options, None, store_path)
    compared = None if options.partition_atoms is None else plan
    return store_status(
        store_path, source_fingerprint=source.fingerprint(), config=config, plan=compared
    )


def prepare_featurize(
    source_path: Where,
    store_path: Where,
    descriptors: DescriptorSet,
    options: FeaturizeOptions = _DEFAULTS,
    n_workers: int | None = 1,
    worker_bytes: float | None = None,
) -> tuple[StructureSource, Store]:
    """Index the source, plan partitions and create (or reopen, to resume) the store
    (``options.partition_atoms=None``: derived from the data, ``n_workers`` and a worker's
    memory limit ``worker_bytes``, where known)."""
    _check_arguments("prepare_featurize", descriptors, options)
    source, plan, config = _target(
        source_path, descriptors, options, n_workers, store_path, worker_bytes
    )
    try:
        store = create_store(
            store_path,
            source_fingerprint=source.fingerprint(),
            plan=plan,
            config=config,
            overwrite=options.overwrite,
            protect=options.protect,
            any_plan=options.partition_atoms is None,
            aside=True,
        )
    except StoreMismatchError as exc:  # named as the caller spells it
        named = exc.naming(options.option_names.get("overwrite", exc.overwrite_option or ""))
        if named is exc:
            raise
        raise named from exc
    if options.repair:
        repair(store)
    _redo_unreported(store)
    return source, store


def _redo_unreported(store: Store) -> None:
    """Mark not done (to compute again) every done partition whose report is gone: its
    group's document was deleted or damaged after it was written, and its statistics
    would be missing from the store's (they live in the report)."""
    for p in store.done_partitions().tolist():
        if store.report(p) is None:
            warnings.warn(
                f"{target_path(store)}: partition {p} is marked done but its report is gone "
                f"(parts/{p}/zarr.json deleted?); computing it again",
                stacklevel=2,
            )
            store.clear_done(p)


def finish_featurize(
    store_path: Where,
    reports: Mapping[int, Mapping[str, Any]] | None = None,
    descriptors: DescriptorSet | None = None,
) -> tuple[Store, dict[str, dict[str, FeatureStats]]]:
    """Merge the done partitions' statistics exactly and record them in the store
    (``reports``: as :meth:`Store.merged_statistics`); with ``descriptors``, a complete
    store's features constant over the whole dataset are warned of."""
    store = open_store(store_path, mode="r+")
    statistics = store.merged_statistics(reports)
    store.update_attrs({"statistics": _statistics_json(statistics)})
    if descriptors is not None and store.is_complete:
        _warn_constant(store, statistics, descriptors)
    return publish_store(store), statistics


def _warn_constant(
    store: Store, statistics: dict[str, dict[str, FeatureStats]], descriptors: DescriptorSet
) -> None:
    """Warn of each descriptor's elements without atoms and features constant over the
    store (:func:`dparallel.descriptors.feature_ranges.range_problems`)."""
    from dparallel.descriptors.feature_ranges import range_problems

    for name, per_element in statistics.items():
        for problem in range_problems(name, per_element, descriptors.descriptors().get(name)):
            warnings.warn(f"{target_path(store)}: {problem}", stacklevel=3)


def featurize_in_process(
    source_path: Where,
    store_path: Where,
    descriptors: DescriptorSet,
    options: FeaturizeOptions = _DEFAULTS,
    n_workers: int | None = 1,
) -> Store:
    """Featurize in this process, partition by partition, without Dask (same store; for
    small jobs, tests and benchmarks). Raises :class:`PartitionFailedError` like
    :func:`featurize` (other partitions kept)."""
    _check_arguments("featurize_in_process", descriptors, options)
    refuse_foreign_target(store_path, options.overwrite, (source_path, *options.protect))
    with StoreLease(store_path, command="featurize (in process)") as lease:
        source, store = prepare_featurize(source_path, store_path, descriptors, options, n_workers)
        failures: dict[int, BaseException] = {}
        for p in store.pending_partitions().tolist():
            lease.check()
            try:
                featurize_partition(source, store.ref, p, descriptors.to_dict())
            except Exception as exc:  # noqa: BLE001 - reported with every other failure
                failures[p] = exc
        store, _ = finish_featurize(store.ref, descriptors=descriptors)
    raise_failures(store, failures)
    return store


def featurize(
    source_path: Where,
    store_path: Where,
    descriptors: DescriptorSet,
    options: FeaturizeOptions = _DEFAULTS,
) -> FeaturizeResult:
    """Featurize ``source_path`` (a structure file) into the zarr store ``store_path`` on a
    Dask cluster, as ``options`` (:class:`FeaturizeOptions`) say of ``descriptors``;
    resumable: a store made with the same source and config is resumed.

    Raises
    ------
    PartitionFailedError
        Some partitions kept failing (or killing their workers); names them and their
        structures. Every other partition is kept, so a rerun computes only those.
    DiskFullError
        Partitions could not be written for lack of space (done ones are kept).
    StoreBusyError
        Another run holds the store's lease (it is featurizing the same store).
    RunInterruptedError
        Interrupted (Ctrl-C): says how many partitions are done and kept.
    """
    from dparallel.cluster import discard_connection, expected_worker_memory, expected_workers
    from dparallel.cluster.dispatch import no_worker_grace
    from dparallel.cluster.expected import connected_size

    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if isinstance(options, FeaturizeOptions):  # whatever fails, also the checks below
            stack.callback(discard_connection, options.connecting)  # closed if it was used
        _check_arguments("featurize", descriptors, options)
        no_worker_grace()  # a bad DPARALLEL_WORKER_WAIT: refused before any work
        # needed before the store only to derive the partition size (a given client is asked)
        derive = options.partition_atoms is None
        n_workers = expected_workers(**options.connect_to()) if derive else None
        memory = expected_worker_memory(**options.connect_to()) if derive else None
        refuse_foreign_target(store_path, options.overwrite, (source_path, *options.protect))
        lease = stack.enter_context(StoreLease(store_path, command="dparallel featurize"))
        if n_workers is None and derive and options.connecting is not None:
            n_workers, memory = connected_size(options.connecting)
        source, store = prepare_featurize(
            source_path, store_path, descriptors, options, n_workers, memory
        )
        pending = [int(p) for p in store.pending_partitions()]
        if n_workers is None and pending:
            n_workers = expected_workers(**options.connect_to())
        _warn_idle_workers(store, pending, n_workers, options)
        try:
            reports: dict[int, dict[str, Any]] = {}
            failures = _run_partitions(source, store, pending, descriptors, lease, options, reports)
        except KeyboardInterrupt:
            done = len(store.done_partitions())
            raise RunInterruptedError(
                f"interrupted; {done} of {store.n_partitions} partitions of "
                f"{target_path(store)} are "
                "done and kept: rerun the same command to compute the rest"
            ) from None
        try:
            store, statistics = finish_featurize(store.ref, reports, descriptors)
        except OSError:
            if not failures:
                raise
            store = open_store(store.ref)  # the failures say more (e.g. a full disk)
    raise_failures(store, failures, options.option_names)
    counts = {
        k: sum(r[k] for r in reports.values()) for k in ("n_structures", "n_atoms", "n_skipped")
    }
    return FeaturizeResult(
        store=store,
        partitions_computed=len(pending),
        partitions_already_done=store.n_partitions - len(pending),
        **counts,
        seconds=time.perf_counter() - t0,
        statistics=statistics,
    )


def _run_partitions(
    source: StructureSource,
    store: Store,
    pending: list[int],
    descriptors: DescriptorSet,
    lease: StoreLease,
    options: FeaturizeOptions,
    reports: dict[int, dict[str, Any]],
) -> dict[int, BaseException]:
    """Connect, announce the work and run every pending partition; returns the failures;
    each report is kept in ``reports``."""
    if not pending:
        return {}
    from dparallel.cluster import connect
    from dparallel.cluster.dispatch import Dispatch, run_partitions
    from dparallel.cluster.gpus import GPU_RESOURCE, gpu_partitions, gpu_worker_addresses
    from dparallel.cluster.installs import check_worker_installs, installed
    from dparallel.cluster.reach import refuse_process_local
    from dparallel.dashboard.events import (
        progress_start_event,
        publish_progress_end,
        publish_progress_start,
    )

    store_path = store.ref  # a task reopens this very store (folder, or generation)
    run = f"featurize:{target_path(store)}"  # the user's path, also while built aside
    spec = descriptors.to_dict()
    progress = options.progress
    with (
        options.connecting.result()
        if options.connecting is not None
        else connect(**options.connect_to(), **featurize_connect_options())
    ) as handle:
        if options.on_connect is not None:
            options.on_connect(handle)
        refuse_process_local(handle.client, source.location, store.location)
        install = installed() if handle.cluster is None else None
        if install is not None:  # workers started elsewhere: the client's install?
            check_worker_installs(handle.client)
        # workers still starting (return_early) count as they will be
        n_gpu = max(len(gpu_worker_addresses(handle.client)), handle.planned_gpus)
        n_all = max(handle.n_workers, handle.planned_workers)
        marked = gpu_partitions(pending, n_gpu, n_all - n_gpu)
        work = (
            len(pending),
            int((store.plan.stops[pending] - store.plan.starts[pending]).sum()),  # structures
            int(store.plan.atoms[pending].sum()),
            store.n_partitions - len(pending),  # done by earlier runs: not this run's count
        )
        warn_task_memory(
            handle.client, source, descriptors, store.plan, pending, options.option_names
        )
        publish_progress_start(run, *work, target=handle.client)
        if progress is not None:
            progress(progress_start_event(run, *work), 0, len(pending))

        def add(p: int, report: dict[str, Any]) -> None:
            reports[p] = report
            _publish_report(run, p, report, handle.client)
            if progress is not None:
                progress(report, len(reports), len(pending))

        how = Dispatch(
            args=lambda p: (source, store_path, p, spec),
            # workers started elsewhere: each task checks its worker too (one may join later)
            kwargs={"torch_threads": options.torch_threads, "install": install},
            name="dparallel-featurize",
            retries=options.retries,
            on_result=add,
            check=lease.check,
            recover=lambda p: recorded_report(open_store(store_path), p),
            resources=lambda p: {GPU_RESOURCE: 1} if p in marked else None,
        )
        try:
            failures = run_partitions(handle.client, featurize_partition, pending, how)
        except BaseException as exc:  # the page says the run stopped, and why
            publish_progress_end(run, exc, target=handle.client)
            raise
        publish_progress_end(run, _failed_words(failures, len(pending)), target=handle.client)
        return failures


def _publish_report(run: str, p: int, report: dict[str, Any], client: Any) -> None:
    """Send partition ``p``'s report to the dashboard, from the driver: a worker's own
    events are dropped while its connection closes (retired or scaled down mid-run). Not
    through a client that lost its scheduler: its events wait for a reconnection that may
    time out (reports handed on from ``recover`` arrive then too)."""
    from dparallel.dashboard.events import publish_progress

    if getattr(client, "status", "running") != "running":
        return
    publish_progress(
        run, p, report["n_structures"], report["n_atoms"], report["seconds"],
        worker=report.get("worker") or "client", target=client, n_skipped=report["n_skipped"],
    )  # fmt: skip


def _failed_words(failures: dict[int, BaseException], n_pending: int) -> str | None:
    """What the dashboard says of a run's failed partitions (``None``: none failed)."""
    if not failures:
        return None
    p, exc = min(failures.items())
    return (
        f"{len(failures)} of {n_pending} partitions failed; partition {p}: "
        f"{type(exc).__name__}: {exc}"
    )


def _warn_idle_workers(
    store: Store, pending: list[int], n_workers: int | None, options: FeaturizeOptions
) -> None:
    """Warn when some workers will get no partition (e.g. fewer structures than workers)."""
    if n_workers is None or not 0 < len(pending) < n_workers:
        return
    plan = store.plan
    atoms = int(plan.atoms[pending].sum())
    structures = int((plan.stops[pending] - plan.starts[pending]).sum())
    name = options.option_names.get("partition_atoms") or _PARTITION_ATOMS
    size = (
        f"at least {MIN_SPLIT_ATOMS} atoms unless {name} says otherwise"
        if options.partition_atoms is None
        else f"at most {options.partition_atoms} atoms as {name} sets: a smaller one makes more"
    )
    warnings.warn(
        f"{len(pending)} partitions for {n_workers} workers: {n_workers - len(pending)} "
        f"workers stay idle ({structures} structures, {atoms} atoms to compute in "
        f"{target_path(store)}; a partition holds whole structures, {size})",
        stacklevel=4,
    )


def _statistics_json(statistics: dict[str, dict[str, FeatureStats]]) -> dict[str, Any]:
    """The store's record (:func:`~dparallel.store.stats.summaries` of each descriptor)."""
    return {name: summaries(per) for name, per in statistics.items()}


def write_scaling_data(
    store: Store,
    path: Where,
    descriptor: str = "acsf",
    statistics: Mapping[str, Mapping[str, FeatureStats]] | None = None,
) -> None:
    """Write n2p2 ``scaling.data`` for ``descriptor`` of ``store`` (rows in n2p2's order,
    :func:`dparallel.n2p2.scaling_data.write_scaling_data`) at ``path``, a local path or a
    URL (written locally, then uploaded); ``statistics`` (e.g.
    ``FeaturizeResult.statistics``) saves merging them from the store again."""
    import tempfile

    from dparallel.io.location import as_location
    from dparallel.n2p2.scaling_data import write_scaling_data as write_n2p2

    if statistics is None:
        statistics = store.merged_statistics()
    merged = {e: s for e, s in (statistics.get(descriptor) or {}).items() if s.count}
    if not merged:  # (an element without atoms gets n2p2's ±DBL_MAX and NaN rows)
        raise StoreIncompleteError(f"{store.target} has no '{descriptor}' statistics to write")
    spec = store.attrs.get("config", {}).get("features", {}).get(descriptor)
    symfuncs = None
    kind = descriptor_kind(descriptor)
    if kind.n2p2 and spec:  # n2p2 reads rows in its sorted order
        symfuncs = kind.load().from_dict(spec)
    where = as_location(path)
    refuse_scaling_target(where, target_path(store))
    if where.local is not None:
        write_n2p2(where.local, merged, symfuncs)
        return
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / where.name
        write_n2p2(local, merged, symfuncs)
        where.upload(local)


def refuse_scaling_target(
    path: Where, store: Where, protect: tuple[Where | None, ...] = ()
) -> None:
    """Raise :class:`UnsafePathError` where ``scaling.data`` may not be written at ``path``:
    a folder, the store or a file in it, a file the run reads or writes (``protect``: the
    input, the descriptors, the log), or an existing file that is not a scaling.data (only
    one is replaced). Nothing is written; call it before a run starts."""
    from dparallel.io.location import as_location, location_key
    from dparallel.n2p2.scaling_data import looks_like_scaling_data

    where = as_location(path)
    target, home = location_key(where), location_key(store)
    said = f"refusing to write scaling data at {path}"
    if target == home or target.startswith(home + "/"):
        raise UnsafePathError(f"{said}: it is or lies inside the store {store}")
    for item in protect:
        if item is not None and location_key(item) == target:
            raise UnsafePathError(f"{said}: the run reads or writes it ({item})")
    if where.local is not None and where.local.is_dir():
        raise UnsafePathError(f"{said}: it is a folder")
    folder = where.local.parent if where.local is not None else None
    if folder is not None and not folder.is_dir():  # the run would end without the file
        shown = Path(path).parent if isinstance(path, (str, os.PathLike)) else folder
        if folder.exists():
            raise UnsafePathError(f"{said}: {shown} is a file, not a folder")
        raise UnsafePathError(f"{said}: its folder {shown} does not exist")
    if where.is_file() and not looks_like_scaling_data(where.read_range(0, 4096)):
        raise UnsafePathError(f"{said}: it holds something else than scaling data")
