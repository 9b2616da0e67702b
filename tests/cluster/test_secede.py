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
    """A second task reaching the block while the first waits there waits for it inside
    the pool, so no third task starts meanwhile: a worker never holds more than twice its
    partitions."""
    _events("a-in", "b-in", "go-a", "go-b")
    first = client.submit(_waiting_task, "a", "go-a", pure=False)
    assert _EVENTS["a-in"].wait(30)
    second = client.submit(_waiting_task, "b", "go-b", pure=False)
    third = client.submit(_quick_task, pure=False)
    assert not _EVENTS["b-in"].wait(1.0)  # the slot is taken
    assert not third.done()  # the second holds the pool's one thread
    _EVENTS["go-a"].set()
    assert _EVENTS["b-in"].wait(30)  # entered once the first left
    assert third.result(timeout=20) > 0  # and left the pool to the third
    _EVENTS["go-b"].set()
    assert first.result(timeout=20) < second.result(timeout=20)


def _twice() -> list[float]:
    """Two blocks in one task (e.g. featurize_in_process run as a task): the second runs
    in place, the thread being outside the pool already."""
    waits = []
    for _ in range(2):
        with outside_the_pool() as waited:
            waits.append(waited)
    return waits


def test_a_task_outside_the_pool_already_runs_a_second_block_in_place(client):
    first, second = client.submit(_twice, pure=False).result(timeout=20)
    assert first < 1.0 and second == 0.0  # seceding twice raised KeyError in the pool


def _waited_behind() -> float:
    with outside_the_pool() as waited:
        return waited


def test_the_wait_for_a_slot_is_told(client):
    """The seconds a task waited for its slot come out of the block (a report keeps its
    own time apart from them)."""
    _events("a-in", "go")
    first = client.submit(_waiting_task, "a", "go", pure=False)
    assert _EVENTS["a-in"].wait(30)
    second = client.submit(_waited_behind, pure=False)
    time.sleep(0.5)
    _EVENTS["go"].set()
    first.result(timeout=20)
    assert second.result(timeout=20) >= 0.4


def test_outside_a_worker_the_block_just_runs():
    """In the client's own thread (featurize in process), nothing is asked of Dask."""
    with outside_the_pool():
        ran = True
    assert ran
