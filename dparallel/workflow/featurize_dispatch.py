"""How a featurize run runs: its options, and the driver's part on the cluster.

:class:`FeaturizeOptions` holds every option of :func:`dparallel.workflow.featurize.featurize`
(reading, the store, the cluster, the tasks, callbacks) as one frozen object.
:func:`run_featurize_partitions` connects (or takes the connection the CLI started),
publishes the run's start to the dashboard, marks a share of the partitions for GPU
workers when the cluster has some (:mod:`dparallel.cluster.gpus`), runs every pending
partition through :func:`dparallel.cluster.dispatch.run_partitions` and keeps each
report; a report lost with its worker is read back from the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from dparallel.store import open_store, target_path
from dparallel.workflow.featurize_task import featurize_partition
from dparallel.workflow.featurize_worker_preload import (
    FEATURIZE_FORKSERVER_PRELOAD,
    featurize_preloads,
)

if TYPE_CHECKING:
    import os
    from collections.abc import Callable
    from concurrent.futures import Future

    from dparallel.cluster import ClusterHandle
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.io import StructureSource
    from dparallel.io.location import Location
    from dparallel.store import Store, StoreLease

__all__ = ["FeaturizeOptions", "run_featurize_partitions"]


@dataclass(frozen=True)
class FeaturizeOptions:
    """How :func:`dparallel.workflow.featurize.featurize` reads, stores and runs.

    The fields are :func:`~dparallel.workflow.featurize.featurize`'s keyword arguments
    (documented there): how to read the source (``format``, ``units``, ``on_error``), how
    to partition and guard the store (``partition_atoms``, ``overwrite``, ``protect``),
    where to run (``client``, ``cluster``, ``scheduler``, ``scheduler_file``,
    ``connecting``), how tasks run (``torch_threads``, ``retries``) and whom to tell
    (``progress``, ``on_connect``).
    """

    format: str | None = None
    units: str = "ase"
    on_error: Literal["raise", "skip"] = "raise"
    partition_atoms: int | None = None
    overwrite: bool = False
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

    def connect_to(self) -> dict[str, Any]:
        """Keyword arguments for :func:`dparallel.cluster.connect` (and
        :func:`~dparallel.cluster.expected_workers`): where to run."""
        return {
            "spec": self.cluster,
            "client": self.client,
            "scheduler": self.scheduler,
            "scheduler_file": self.scheduler_file,
        }


def run_featurize_partitions(
    source: StructureSource,
    store: Store,
    pending: list[int],
    descriptors: DescriptorSet,
    lease: StoreLease,
    options: FeaturizeOptions,
    reports: dict[int, dict[str, Any]],
) -> tuple[dict[str, int], dict[int, BaseException]]:
    """Connect, announce the work and run every pending partition; returns the summed
    counts of the reports and the failures; each report is kept in ``reports``."""
    counts = {"n_structures": 0, "n_atoms": 0, "n_skipped": 0}
    if not pending:
        return counts, {}
    from dparallel.cluster import connect
    from dparallel.cluster.dispatch import Dispatch, run_partitions
    from dparallel.cluster.gpus import GPU_RESOURCE, gpu_partitions, gpu_worker_addresses
    from dparallel.dashboard.events import progress_start_event, publish_progress_start

    store_path = store.ref  # a task reopens this very store (folder, or generation)
    run = f"featurize:{target_path(store)}"  # the user's path, also while built aside
    spec = descriptors.to_dict()
    progress = options.progress
    with (
        options.connecting.result()
        if options.connecting is not None
        else connect(
            **options.connect_to(),
            worker_preload=featurize_preloads(),
            forkserver_preload=(FEATURIZE_FORKSERVER_PRELOAD,),
            return_early=True,
        )
    ) as handle:
        if options.on_connect is not None:
            options.on_connect(handle)
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
        publish_progress_start(run, *work, target=handle.client)
        if progress is not None:
            progress(progress_start_event(run, *work), 0, len(pending))
        done = 0

        def add(p: int, report: dict[str, Any]) -> None:
            nonlocal done
            done += 1
            reports[p] = report
            for key in counts:
                counts[key] += report[key]
            if progress is not None:
                progress(report, done, len(pending))

        how = Dispatch(
            args=lambda p: (source, store_path, p, spec),
            kwargs={"torch_threads": options.torch_threads, "run": run},
            name="dparallel-featurize",
            retries=options.retries,
            on_result=add,
            check=lease.check,
            recover=lambda p: _recorded_report(store_path, p),
            resources=lambda p: {GPU_RESOURCE: 1} if p in marked else None,
        )
        failures = run_partitions(handle.client, featurize_partition, pending, how)
    return counts, failures


def _recorded_report(store_path: str | Location, p: int) -> dict[str, Any] | None:
    """Partition ``p``'s report as its task recorded it in the store, once it is done
    (what the driver uses when the task's own result was lost with its worker)."""
    store = open_store(store_path)
    if p not in set(store.done_partitions().tolist()):
        return None
    return store.report(p)
