"""What a cluster :func:`~dparallel.cluster.connect` would give will have, known before a
run plans its work: how many workers (:func:`expected_workers`) and the least memory one
of them may use (:func:`expected_worker_memory`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dask.system import CPU_COUNT
from distributed.worker_memory import parse_memory_limit

from dparallel.cluster.given_client import check_where
from dparallel.cluster.spec import ClusterSpec
from dparallel.cluster.where import connection_kind

if TYPE_CHECKING:
    import os
    from concurrent.futures import Future

    from distributed import Client

__all__ = [
    "connected_size",
    "expected_worker_memory",
    "expected_workers",
    "local_memory_limit",
    "smallest_memory_limit",
]

logger = logging.getLogger(__name__)


def expected_workers(
    spec: ClusterSpec | None = None,
    *,
    client: Client | None = None,
    scheduler: str | None = None,
    scheduler_file: str | os.PathLike[str] | None = None,
) -> int | None:
    """Workers :func:`connect` with these arguments will have, when known without starting
    it: a given client's current ones, or those its cluster object plans (a
    ``SpecCluster``'s ``plan``: a SLURM cluster's jobs still queued), a local cluster's
    (one per core unless ``spec.n_workers``), a SLURM cluster's (``jobs`` × ``cores``
    processes), else ``spec.n_workers`` (``None``: unknown)."""
    check_where(spec, client)
    spec = spec if spec is not None else ClusterSpec()
    if client is not None:  # its workers, and those its cluster object has asked for
        found = len(client.scheduler_info(n_workers=-1).get("workers", {}))
        planned = getattr(getattr(client, "cluster", None), "plan", None) or ()
        return max(found, len(planned)) or None
    kind = connection_kind(spec, scheduler=scheduler, scheduler_file=scheduler_file)
    if kind == "local":
        return _local_workers(spec)
    if kind == "slurm":
        return spec.slurm.jobs * spec.slurm.cores
    return spec.n_workers


def smallest_memory_limit(client: Client) -> float | None:
    """The smallest memory limit (bytes) of the workers ``client``'s scheduler knows now;
    ``None`` where none has one (no workers, or unlimited)."""
    workers = client.scheduler_info(n_workers=-1).get("workers") or {}
    limits = [w.get("memory_limit") for w in workers.values()]
    known = [float(x) for x in limits if isinstance(x, (int, float)) and x > 0]
    return min(known) if known else None


def expected_worker_memory(
    spec: ClusterSpec | None = None,
    *,
    client: Client | None = None,
    scheduler: str | None = None,
    scheduler_file: str | os.PathLike[str] | None = None,
) -> float | None:
    """The memory limit (bytes) of a worker of the cluster :func:`connect` with these
    arguments gives, where known before it starts: a given client's smallest
    (:func:`smallest_memory_limit`), a local cluster's as Dask parses ``spec.memory_limit``
    (its default, ``"auto"``: the machine's memory shared by the workers); ``None``
    otherwise (workers started elsewhere, or unlimited)."""
    check_where(spec, client)
    spec = spec if spec is not None else ClusterSpec()
    if client is not None:
        return smallest_memory_limit(client)
    if connection_kind(spec, scheduler=scheduler, scheduler_file=scheduler_file) != "local":
        return None
    limit = local_memory_limit(spec)
    return float(limit) if limit else None


def local_memory_limit(spec: ClusterSpec) -> int | None:
    """Bytes each worker of the local cluster ``spec`` starts may use, as Dask parses
    ``spec.memory_limit``; ``None`` (Dask's default, ``"auto"``): the machine's memory
    shared by all its workers, CPU and GPU (what a local start passes explicitly: Dask
    would share it among the workers of the cluster's first start alone)."""
    if spec.memory_limit is None:
        return parse_memory_limit("auto", 1, _local_workers(spec), logger=logger)
    return parse_memory_limit(spec.memory_limit, spec.threads_per_worker, logger=logger)


def _local_workers(spec: ClusterSpec) -> int:
    """Workers of the local cluster ``spec`` starts: one per core unless ``n_workers``,
    and one per GPU."""
    return (spec.n_workers or CPU_COUNT) + spec.gpus


def connected_size(connecting: Future[Any]) -> tuple[int | None, float | None]:
    """Workers of a cluster a run does not start, once ``connecting`` (a future of a
    :class:`~dparallel.cluster.ClusterHandle`) has connected (as ``dparallel run``'s
    client counts them), and their smallest memory limit, to derive a partition size;
    ``(None, None)`` where the connection failed: a store with nothing pending needs no
    cluster, and one with work raises that failure where its partitions need the cluster."""
    try:
        handle = connecting.result()
    except Exception:  # noqa: BLE001 - raised again by the same future where it matters
        return None, None
    return expected_workers(client=handle.client), expected_worker_memory(client=handle.client)
