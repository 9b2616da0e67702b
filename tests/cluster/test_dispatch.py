"""run_partitions: every partition's result handed back, failures returned by partition."""

from __future__ import annotations

import pytest

from dparallel.cluster.dispatch import killed_worker, run_partitions


def _square_or_fail(p: int, offset: int, *, fail: int) -> int:
    if p == fail:
        raise ValueError(f"partition {p} is bad")
    return p * p + offset


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


def test_results_reach_on_result_and_failures_come_back_by_partition(client) -> None:
    results: dict[int, int] = {}
    checks = []
    failures = run_partitions(
        client,
        _square_or_fail,
        [0, 1, 2, 3],
        args=lambda p: (p, 10),
        kwargs={"fail": 2},
        name="test-dispatch",
        on_result=results.__setitem__,
        check=lambda: checks.append(1),
    )
    assert results == {0: 10, 1: 11, 3: 19}
    assert list(failures) == [2]
    assert isinstance(failures[2], ValueError)
    assert "partition 2 is bad" in str(failures[2])
    assert not killed_worker(failures[2])
    assert len(checks) == 4  # once before each result is taken


def test_a_raising_check_stops_the_run(client) -> None:
    class Stop(Exception):
        pass

    def stop() -> None:
        raise Stop

    with pytest.raises(Stop):
        run_partitions(client, _square_or_fail, [0, 1], args=lambda p: (p, 0),
                       kwargs={"fail": -1}, check=stop)  # fmt: skip


def test_killed_worker_is_recognised() -> None:
    from distributed.scheduler import KilledWorker

    assert killed_worker(KilledWorker("task", "worker", 1))
    assert not killed_worker(None)
