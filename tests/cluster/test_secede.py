"""A task's wait outside its worker's thread pool (dparallel.cluster.secede): the worker
runs its next task meanwhile, one waiting task per worker thread, nothing outside Dask."""

from __future__ import annotations

import threading
import time

import pytest

from dparallel.cluster.secede import outside_the_pool

pytestmark = pytest.mark.integration

_EVENTS: dict[str, threading.Event] = {}


def _waiting_task(name: str, release: str) -> float:
    """Enter the block, say so, wait (bounded) for ``release``; when it entered."""
    with outside_the_pool():
        entered = time.monotonic()
        _EVENTS[f"{name}-in"].set()
        assert _EVENTS[release].wait(30), f"{release} never came"
    return entered


def _quick_task() -> float:
    return time.monotonic()


def _events(*names: str) -> None:
    _EVENTS.clear()
    _EVENTS.update({n: threading.Event() for n in names})


@pytest.fixture
def client():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None)
        as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        yield client


def test_the_next_task_runs_while_one_waits_outside_the_pool(client):
    """One thread: a task waiting in the block does not hold it, so a second task runs
    and finishes before the first is let go (without ``secede`` it would wait 30 s and
    fail)."""
    _events("a-in", "go")
    first = client.submit(_waiting_task, "a", "go", pure=False)
    assert _EVENTS["a-in"].wait(30)
    second = client.submit(_quick_task, pure=False)
    assert second.result(timeout=20) > 0
    assert not first.done()  # still waiting outside: it finishes only when let go
    _EVENTS["go"].set()
    assert first.result(timeout=20) > 0


def test_one_task_per_thread_waits_outside_the_pool(client):
    """A second task reaching the block while the first waits there waits for it (inside
    the pool): a worker never holds more than twice its partitions."""
    _events("a-in", "b-in", "go-a", "go-b")
    first = client.submit(_waiting_task, "a", "go-a", pure=False)
    assert _EVENTS["a-in"].wait(30)
    second = client.submit(_waiting_task, "b", "go-b", pure=False)
    assert not _EVENTS["b-in"].wait(1.0)  # the slot is taken
    _EVENTS["go-a"].set()
    assert _EVENTS["b-in"].wait(30)  # entered once the first left
    _EVENTS["go-b"].set()
    assert first.result(timeout=20) < second.result(timeout=20)


def test_outside_a_worker_the_block_just_runs():
    """In the client's own thread (featurize in process), nothing is asked of Dask."""
    with outside_the_pool():
        ran = True
    assert ran
