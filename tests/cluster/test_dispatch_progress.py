"""Dask's own progress counts what the dparallel page counts: every partition of the run."""

from __future__ import annotations

import time

from dparallel.cluster.dispatch import Dispatch, run_partitions


def _square(p: int) -> int:
    return p * p


def test_the_scheduler_keeps_every_task_of_the_run_until_it_ends(client) -> None:
    """Dask's progress bars count the tasks the scheduler knows: a finished task released
    at once drops out of both its numbers (the 1/70 beside the page's 21/89)."""
    scheduler = client.cluster.scheduler
    known: list[int] = []

    def on_result(p: int, result: int) -> None:
        time.sleep(0.3)  # time for the client's release of earlier results to arrive
        known.append(sum(1 for key in scheduler.tasks if str(key).startswith("test-progress")))

    failures = run_partitions(
        client, _square, range(6),
        Dispatch(args=lambda p: (p,), name="test-progress", on_result=on_result),
    )  # fmt: skip
    assert failures == {}
    assert known == [6] * 6
    deadline = time.monotonic() + 10
    while any(str(k).startswith("test-progress") for k in scheduler.tasks):
        assert time.monotonic() < deadline, "the tasks are released once the run ends"
        time.sleep(0.05)
