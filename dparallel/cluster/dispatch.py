"""Run one task per partition on a Dask client; rerun alone those whose worker died.

Generic over the task: :func:`run_partitions` submits ``task(*args(p), **kwargs)`` for every
partition ``p`` (as its :class:`Dispatch` says), hands each result to ``on_result`` as it
arrives and returns the exceptions of the partitions that failed. A worker that dies takes
the tasks queued on it down too, and the scheduler counts them all as suspects
(``KilledWorker``): each such partition is rerun alone, one at a time, so an innocent one
finishes and only the one that kills its worker fails again. Where no partition has run
fine yet and :data:`KILLING_IN_A_ROW` reruns in a row all killed their workers, the rest
are not rerun (the workers die whatever they run).

Collecting a result never waits without bound: a task can finish and its worker die before
the driver fetches the (small) result, and Dask then recomputes it, behind whatever else
is queued (or killing workers). After :data:`RESULT_WAIT_S` the result is taken from
``recover(p)`` (featurize: the report the task wrote into the store before returning),
or, without one, the partition is submitted again and waited for like a rerun.

A restart of the scheduler (``Client.restart``, by any client of a shared cluster) cancels
every task it holds: those partitions are submitted again, up to :data:`RESTARTS_OUTLIVED`
times each, and a partition cancelled by more fails with :class:`SchedulerRestartedError`.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from dparallel.cluster.batch_jobs import jobs_state
from dparallel.cluster.memory_kills import KillWatch, explain_deaths
from dparallel.errors import ClusterError, SchedulerRestartedError, WorkerKilledError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "ENV_WORKER_WAIT",
    "KILLING_IN_A_ROW",
    "NO_WORKER_GRACE_S",
    "RESTARTS_OUTLIVED",
    "RESULT_WAIT_S",
    "Dispatch",
    "killed_worker",
    "no_worker_grace",
    "run_partitions",
]

log = logging.getLogger(__name__)

#: Seconds a run waits with no worker in the cluster before it gives its partitions up
#: (``$DPARALLEL_WORKER_WAIT`` where set: :func:`no_worker_grace`).
NO_WORKER_GRACE_S = 120.0
#: Environment variable: seconds to wait for a worker (nodes scaled up from none may take
#: minutes to start one).
ENV_WORKER_WAIT = "DPARALLEL_WORKER_WAIT"
#: Partitions rerun alone that kill their worker again, one after another, after which the
#: rest are not rerun: the workers die whatever they run (a memory limit below what one
#: partition needs), and each rerun would only cost the scheduler's allowed worker deaths.
KILLING_IN_A_ROW = 3
#: Seconds a finished task's result may take to reach the driver before it is recovered
#: (``recover``) or the partition submitted again.
RESULT_WAIT_S = 30.0
#: Restarts of the scheduler (``Client.restart``) a partition's task outlives: each cancels
#: it, and it is submitted again (its workers come back with the restart).
RESTARTS_OUTLIVED = 3


@dataclass(frozen=True)
class Dispatch:
    """How :func:`run_partitions` runs each partition ``p``'s task and hands its result on.

    ``check()`` runs before each result is taken and while a rerun waits (e.g. a lease's
    check, which raises to stop the run). ``recover(p)``: ``p``'s result when the finished
    task's own is lost with its worker (``None``: not to be had; ``p`` then runs again).
    """

    args: Callable[[int], tuple[Any, ...]]  # p → the task's positional arguments
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # the same for every p
    name: str = "dparallel-task"  # the start of the Dask key
    retries: int = 0  # Dask's extra attempts of a task that raised
    on_result: Callable[[int, Any], None] = lambda p, result: None  # in the caller's thread
    check: Callable[[], None] = lambda: None
    recover: Callable[[int], Any] | None = None
    # p → the Dask resources its task needs ({"GPU": 1}: only workers advertising them)
    resources: Callable[[int], Mapping[str, float] | None] | None = None

    def submit(self, client: Any, task: Callable[..., Any], p: int) -> Any:
        """Submit partition ``p``'s task to ``client``; its future."""
        return client.submit(
            task,
            *self.args(p),
            **self.kwargs,
            key=f"{self.name}-{p}-{os.getpid()}-{time.time_ns()}",
            pure=False,
            retries=self.retries,
            resources=None if self.resources is None else self.resources(p),
        )


def run_partitions(
    client: Any, task: Callable[..., Any], partitions: Sequence[int], how: Dispatch
) -> dict[int, BaseException]:
    """Run ``task(*how.args(p), **how.kwargs)`` for each of ``partitions`` on ``client``;
    returns partition → exception of those that failed in the end (not those rerun fine)."""
    failures: dict[int, BaseException] = {}
    futures = {how.submit(client, task, p): p for p in partitions}
    held = list(futures)  # until the end: Dask's progress then counts done of all, as ours
    lost: list[int] = []
    watch = KillWatch(client)
    restarts: dict[int, int] = {}  # partition → restarts of the scheduler that cancelled it
    resubmitted = 0
    while futures:
        done = _wait_with_workers(client, list(futures), how.check, watch)
        if done is None:  # every worker gone (or killed as it starts): the rest cannot run
            cause = watch.stopped or _no_worker(client)  # one look at the queue for all
            for p in futures.values():
                failures[p] = cause
            held.clear()
            return explain_deaths(client, failures)
        for future in done:
            how.check()
            p = futures.pop(future)
            if not _collect(future, p, how, failures):
                lost.append(p)
            elif _restarted(failures.get(p)):
                restarts[p] = restarts.get(p, 0) + 1
                if restarts[p] > RESTARTS_OUTLIVED:
                    failures[p] = _restarted_too_often(client, restarts[p])
                    continue
                del failures[p]
                again = how.submit(client, task, p)
                futures[again] = p
                held.append(again)
                resubmitted += 1
        if resubmitted:
            _say_restarted(client, resubmitted)
            resubmitted = 0
        watch.progress()
    rerun = sorted({*lost, *(p for p, exc in failures.items() if killed_worker(exc))})
    # a partition that ran fine shows the workers can run one: then every partition that
    # killed its worker is rerun alone, however many before it killed theirs again
    ran_fine = any(p not in failures and p not in rerun for p in partitions)
    in_a_row = 0  # reruns alone that killed their worker again, one after another
    for i, p in enumerate(rerun):  # alone, one at a time
        if in_a_row >= KILLING_IN_A_ROW and not ran_fine:
            for q in rerun[i:]:
                failures[q] = _not_rerun(in_a_row)
            break
        how.check()
        future = how.submit(client, task, p)
        if _wait_with_workers(client, [future], how.check, watch):
            if not _collect(future, p, how, failures):
                failures[p] = ClusterError(
                    f"the result of partition {p} was lost twice with its worker"
                )
            watch.progress()
        else:
            failures[p] = watch.stopped or _no_worker(client)
        in_a_row = in_a_row + 1 if killed_worker(failures.get(p)) else 0
        ran_fine = ran_fine or p not in failures
    held.clear()  # the scheduler may forget the tasks now
    return explain_deaths(client, failures)


def _not_rerun(in_a_row: int) -> ClusterError:
    return ClusterError(
        f"not rerun alone: no partition has run without killing its worker, and the "
        f"{in_a_row} rerun alone before it killed theirs too, so the workers die whatever "
        "they run (a memory limit too small for one partition? see the workers' logs); fix "
        "that and rerun the same command"
    )


def _restarted(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a task's cancellation by a restart of the scheduler."""
    groups = getattr(exc, "error_groups", None)  # FuturesCancelledError
    reasons = [g.reason for g in groups] if groups else [getattr(exc, "reason", None)]
    return "scheduler-restart" in reasons


def _scheduler_address(client: Any) -> str:
    return getattr(getattr(client, "scheduler", None), "address", None) or "the scheduler"


def _say_restarted(client: Any, n: int) -> None:
    """Warn that the scheduler was restarted and ``n`` cancelled partitions run again."""
    warnings.warn(
        f"{_scheduler_address(client)} was restarted (Client.restart, by a client of the "
        f"cluster) and cancelled {n} partitions of this run: they are submitted again "
        f"(at most {RESTARTS_OUTLIVED} times each), the done ones kept",
        stacklevel=3,
    )


def _restarted_too_often(client: Any, n: int) -> SchedulerRestartedError:
    return SchedulerRestartedError(
        f"{_scheduler_address(client)} was restarted {n} time{'s' if n > 1 else ''} during "
        "the run (Client.restart by a client of the cluster: another user's?), each time "
        "cancelling the task"
    )


def no_worker_grace() -> float:
    """Seconds a run waits with no worker: ``$DPARALLEL_WORKER_WAIT``, else
    :data:`NO_WORKER_GRACE_S` (a bad value is a ``ConfigError`` naming the variable)."""
    from dparallel.config import env_number

    return env_number(ENV_WORKER_WAIT, NO_WORKER_GRACE_S, "seconds", positive=True)


def _no_worker(client: Any) -> ClusterError:
    queued = jobs_state(client)  # a batch system's jobs: why none joined is in its queue
    why = (
        f"{queued}; {ENV_WORKER_WAIT}=SECONDS waits longer for jobs the queue starts late"
        if queued
        else f"none joined: an adaptive cluster that did not start one in time: "
        f"{ENV_WORKER_WAIT}=SECONDS waits longer; or the workers died or left: killed and "
        "not restarted by their nannies, or closed on an error of their own, such as a "
        "worker that cannot import dparallel, which Dask reports only in that worker's "
        "log; see the workers' logs"
    )
    return ClusterError(f"no worker alive for {no_worker_grace():.0f} s to run it on ({why})")


def _say_waiting(client: Any) -> None:
    """Warn that the cluster has no worker and for how long the run waits for one."""
    queued = jobs_state(client)
    how = queued or (
        "an adaptive cluster starts them for the queued tasks; start some with "
        "`dask worker ADDRESS`"
    )
    warnings.warn(
        f"{_scheduler_address(client)} has no worker: the run waits up to "
        f"{no_worker_grace():.0f} s for one to join ({how}; {ENV_WORKER_WAIT}=SECONDS to "
        "wait longer), then stops, keeping every partition done",
        stacklevel=2,
    )


def _collect(future: Any, p: int, how: Dispatch, failures: dict[int, BaseException]) -> bool:
    """Hand ``p``'s result on or record its failure; False when its result is lost."""
    found = _outcome(future, p, how.recover)
    if found is _LOST:
        return False
    if isinstance(found, _Failed):
        failures[p] = found.exc  # reported together at the end
        log.info("partition %d failed: %s", p, found.exc)
        return True
    failures.pop(p, None)
    how.on_result(p, found)
    return True


class _Failed(NamedTuple):
    """A task's exception, as :func:`_outcome` returns it."""

    exc: BaseException


#: :func:`_outcome` of a finished task whose result went with its worker.
_LOST = object()


def _outcome(future: Any, p: int, recover: Callable[[int], Any] | None) -> Any:
    """The result of a done ``future``, a :class:`_Failed` or :data:`_LOST`, within
    :data:`RESULT_WAIT_S` (a lost result is taken from ``recover`` when it has it)."""
    from distributed import wait

    try:
        wait(future, timeout=RESULT_WAIT_S)  # at once unless it was lost meanwhile
        if future.status == "finished":
            return future.result(timeout=RESULT_WAIT_S)
        exc = future.exception(timeout=RESULT_WAIT_S)
        return _Failed(exc if exc is not None else ClusterError(f"partition {p}: no result"))
    except TimeoutError:
        pass
    except Exception as exc:  # noqa: BLE001 - the task's own error, or a cancelled future
        return _Failed(exc)
    log.warning(
        "partition %d finished but its result did not arrive within %.0f s (its worker died?); %s",
        p,
        RESULT_WAIT_S,
        "taking it from where the task recorded it" if recover else "running it again",
    )
    future.cancel()
    if recover is not None:
        found = recover(p)
        if found is not None:
            return found
    return _LOST


def killed_worker(exc: BaseException | None) -> bool:
    """Whether the scheduler gave up on a task because its workers kept dying (Dask's
    ``KilledWorker``, or the :class:`WorkerKilledError` :func:`run_partitions` makes of it)."""
    from distributed.scheduler import KilledWorker

    return isinstance(exc, (KilledWorker, WorkerKilledError))


def _wait_with_workers(
    client: Any, futures: list[Any], check: Callable[[], None], watch: KillWatch
) -> Any:
    """Wait until one of ``futures`` is done or cancelled (calling ``check`` every few
    seconds); those, or None (all of them cancelled) once the cluster has had no worker for
    :func:`no_worker_grace`, or ``watch`` found its workers killed for memory as they
    start (its ``stopped`` says so) — never an unbounded wait."""
    from concurrent.futures import CancelledError

    from distributed import wait

    without_since: float | None = None
    grace = no_worker_grace()
    while True:
        try:
            done, _ = wait(futures, timeout=5, return_when="FIRST_COMPLETED")
        except TimeoutError:
            pass
        except CancelledError:  # some cancelled (the scheduler lost): each says why
            return [future for future in futures if future.status != "pending"]
        else:
            return done
        check()
        workers = client.scheduler_info().get("workers") or {}
        if workers:
            without_since = None
        elif without_since is None:
            without_since = time.monotonic()
            _say_waiting(client)
        gone = without_since is not None and time.monotonic() - without_since > grace
        watch.stopped = watch.stalled(workers)
        if gone or watch.stopped is not None:
            for future in futures:
                future.cancel()
            return None
