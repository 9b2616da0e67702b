"""What the nannies' memory kills tell the driver (their ``worker-restart-memory`` events).

:func:`explain_deaths` turns Dask's ``KilledWorker`` into a :class:`WorkerKilledError`
saying whether the last worker was killed for memory. :class:`KillWatch` notices workers
killed for memory more often than the tasks they ran can account for: a memory limit
below what a worker needs before it runs anything (it is killed as it starts, never
holding a task long enough for Dask to count it, so no ``KilledWorker`` ever comes).
"""

from __future__ import annotations

from typing import Any

from dparallel.errors import WorkerKilledError

__all__ = ["MEMORY_KILL_TOPIC", "KillWatch", "explain_deaths"]

#: The event a nanny logs on the scheduler when it kills its worker for memory.
MEMORY_KILL_TOPIC = "worker-restart-memory"
#: Memory kills without any task finishing, beyond those the running tasks can account
#: for (each task is given up after ``allowed-failures`` + 1 deaths), before giving up.
SPARE_KILLS = 10


def _kills(client: Any) -> list[tuple[float, dict[str, Any]]]:
    """The memory kills the scheduler holds (its last 1,000): (time, event) pairs."""
    try:
        return list(client.get_events(MEMORY_KILL_TOPIC))
    except Exception:  # noqa: BLE001 - a scheduler lost meanwhile: nothing to tell
        return []


def _last(events: list[tuple[float, dict[str, Any]]], limit: object = None) -> str:
    """The memory in use at the last kill of ``events`` (and the worker's ``limit``)."""
    from dask.utils import format_bytes

    text = f"{format_bytes(events[-1][1]['rss'])} in use"
    return text + (f" of its {format_bytes(limit)} limit" if isinstance(limit, int) else "")


def _of_worker(events: list[tuple[float, dict[str, Any]]], worker: Any) -> list:
    """The kills of ``worker`` (a scheduler's ``WorkerState``): by its process where it has
    one (a nanny restarting fast names the address of an earlier worker), else by address."""
    pid = getattr(worker, "pid", None)
    if pid:
        return [e for e in events if e[1].get("pid") == pid]
    return [e for e in events if e[1].get("worker") == getattr(worker, "address", worker)]


def explain_deaths(client: Any, failures: dict[int, BaseException]) -> dict[int, BaseException]:
    """``failures`` with each ``KilledWorker`` replaced by a :class:`WorkerKilledError`
    saying how often the partition's workers died and whether a nanny killed the last one
    for memory."""
    from distributed.scheduler import KilledWorker

    killed = {p: exc for p, exc in failures.items() if isinstance(exc, KilledWorker)}
    if not killed:
        return failures
    events = _kills(client)
    explained = dict(failures)
    for p, exc in killed.items():
        last = getattr(exc.last_worker, "address", exc.last_worker)
        said = f"its worker died on each of {exc.allowed_failures + 1} attempts to run it"
        mine = _of_worker(events, exc.last_worker)
        if mine:
            limit = getattr(exc.last_worker, "memory_limit", None)
            why = f"the last, {last}, killed by its nanny for memory: {_last(mine, limit)}"
        else:
            why = (
                f"the last, {last}, was not killed for memory by a nanny: a signal, the system's "
                "out-of-memory killer or a crash; see the workers' logs"
            )
        explained[p] = WorkerKilledError(f"{said} ({why})", memory=bool(mine))
    return explained


class KillWatch:
    """Counts the memory kills since a task last finished (:meth:`progress`);
    :meth:`stalled` says when there are more than the tasks running could cause."""

    def __init__(self, client: Any) -> None:
        import dask

        self.client = client
        self.deaths = int(dask.config.get("distributed.scheduler.allowed-failures")) + 1
        self.nannies: set[str] = set()  # every worker slot seen (a nanny outlives its workers)
        self.since = max((t for t, _ in _kills(client)), default=0.0)  # scheduler's clock
        self.stopped: WorkerKilledError | None = None  # what :meth:`stalled` last said
        self.limits: set[object] = set()  # the workers' memory limits seen
        self._observe(client.scheduler_info().get("workers") or {})

    def _observe(self, workers: dict[str, Any]) -> None:
        """Note the worker slots and memory limits of the scheduler's ``workers``."""
        self.nannies.update(str(w.get("nanny") or a) for a, w in workers.items())
        self.limits.update(w.get("memory_limit") for w in workers.values())

    def progress(self) -> None:
        """A task finished (or failed): the kills so far are accounted for."""
        self.since = max((t for t, _ in _kills(self.client)), default=self.since)

    def stalled(self, workers: dict[str, Any]) -> WorkerKilledError | None:
        """The error to fail the waiting tasks with, when the workers have been killed for
        memory more often than the running tasks can account for (``workers``: the
        scheduler's, for their nannies), else ``None``."""
        self._observe(workers)
        recent = [e for e in _kills(self.client) if e[0] > self.since]
        allowed = self.deaths * max(len(self.nannies), 1) + SPARE_KILLS
        if len(recent) <= allowed:
            return None
        return WorkerKilledError(
            f"not run: the workers were killed for memory {len(recent)} times since a task "
            f"last finished, more than the tasks they ran can account for (the last at "
            f"{_last(recent, *self.limits) if len(self.limits) == 1 else _last(recent)}): "
            "they need more memory than their limit before running any",
            memory=True,
        )
