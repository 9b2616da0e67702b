"""Run one task per partition on a Dask client; rerun alone those whose worker died.

Generic over the task: :func:`run_partitions` submits ``task(*args(p), **kwargs)`` for every
partition ``p``, hands each result to ``on_result`` as it arrives and returns the exceptions
of the partitions that failed. A worker that dies takes the tasks queued on it down too, and
the scheduler counts them all as suspects (``KilledWorker``): each such partition is rerun
alone, one at a time, so an innocent one finishes and only the one that kills its worker
fails again.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from dparallel.errors import ClusterError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = ["NO_WORKER_GRACE_S", "killed_worker", "run_partitions"]

log = logging.getLogger(__name__)

#: Seconds a rerun waits with no worker in the cluster before it gives the partition up.
NO_WORKER_GRACE_S = 120.0


def run_partitions(
    client: Any,
    task: Callable[..., Any],
    partitions: Sequence[int],
    *,
    args: Callable[[int], tuple[Any, ...]],
    kwargs: Mapping[str, Any] | None = None,
    name: str = "dparallel-task",
    retries: int = 0,
    on_result: Callable[[int, Any], None] | None = None,
    check: Callable[[], None] | None = None,
) -> dict[int, BaseException]:
    """Run ``task(*args(p), **kwargs)`` for each of ``partitions`` on ``client``.

    ``on_result(p, result)`` is called in the caller's thread for each finished task;
    ``check()`` before each result is taken and while a rerun waits (e.g. a lease's check,
    which raises to stop the run). ``retries`` are Dask's extra attempts of a task that
    raised. Returns partition → exception of those that failed, in the end (a partition
    whose rerun finishes is not in it).
    """
    from distributed import as_completed

    extra = dict(kwargs or {})
    failures: dict[int, BaseException] = {}

    def submit(p: int) -> Any:
        return client.submit(
            task,
            *args(p),
            **extra,
            key=f"{name}-{p}-{os.getpid()}-{time.time_ns()}",
            pure=False,
            retries=retries,
        )

    def collect(future: Any, p: int) -> None:
        if future.status != "finished":
            failures[p] = future.exception()  # reported together at the end
            log.info("partition %d failed: %s", p, failures[p])
            return
        failures.pop(p, None)
        result = future.result()
        if on_result is not None:
            on_result(p, result)

    futures = {submit(p): p for p in partitions}
    held = list(futures)  # until the end: Dask's progress then counts done of all, as ours
    for future in as_completed(futures):
        if check is not None:
            check()
        collect(future, futures.pop(future))
    for p in sorted(p for p, exc in failures.items() if killed_worker(exc)):
        if check is not None:
            check()
        future = submit(p)
        if _wait_with_workers(client, future, check):
            collect(future, p)
        else:
            failures[p] = ClusterError(
                f"no worker alive for {NO_WORKER_GRACE_S:.0f} s to rerun it on "
                "(the workers' nannies stopped restarting them)"
            )
    held.clear()  # the scheduler may forget the tasks now
    return failures


def killed_worker(exc: BaseException | None) -> bool:
    """Whether the scheduler gave up on a task because its workers kept dying."""
    from distributed.scheduler import KilledWorker

    return isinstance(exc, KilledWorker)


def _wait_with_workers(client: Any, future: Any, check: Callable[[], None] | None) -> bool:
    """Wait for ``future`` (calling ``check``); False (future cancelled) once the cluster
    has had no worker for :data:`NO_WORKER_GRACE_S` — never an unbounded wait."""
    from distributed import wait

    without_since: float | None = None
    while True:
        try:
            wait(future, timeout=5)
        except TimeoutError:
            pass
        else:
            return True
        if check is not None:
            check()
        if client.scheduler_info().get("workers"):
            without_since = None
        elif without_since is None:
            without_since = time.monotonic()
        elif time.monotonic() - without_since > NO_WORKER_GRACE_S:
            future.cancel()
            return False
