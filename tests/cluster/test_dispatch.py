"""run_partitions: every partition's result handed back, failures returned by partition."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dparallel.cluster.dispatch import Dispatch, killed_worker, run_partitions
from dparallel.errors import ClusterError

if TYPE_CHECKING:
    from collections.abc import Iterator


def _square_or_fail(p: int, offset: int, *, fail: int) -> int:
    if p == fail:
        raise ValueError(f"partition {p} is bad")
    return p * p + offset


def test_results_reach_on_result_and_failures_come_back_by_partition(client) -> None:
    results: dict[int, int] = {}
    checks = []
    failures = run_partitions(
        client,
        _square_or_fail,
        [0, 1, 2, 3],
        Dispatch(
            args=lambda p: (p, 10),
            kwargs={"fail": 2},
            name="test-dispatch",
            on_result=results.__setitem__,
            check=lambda: checks.append(1),
        ),
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
        how = Dispatch(args=lambda p: (p, 0), kwargs={"fail": -1}, check=stop)
        run_partitions(client, _square_or_fail, [0, 1], how)


def test_killed_worker_is_recognised() -> None:
    from distributed.scheduler import KilledWorker

    assert killed_worker(KilledWorker("task", "worker", 1))
    assert not killed_worker(None)


def test_a_result_lost_with_its_worker_is_recovered_not_waited_for(tmp_path, monkeypatch) -> None:
    """The race behind a 600 s hang: a task finishes, its worker dies before the driver
    fetches the result, and the recompute does not finish; the driver recovers the result
    (``recover``) after a bounded wait instead of waiting on the recompute."""
    from distributed import Client, LocalCluster

    import dparallel.cluster.dispatch as dispatch

    monkeypatch.setattr(dispatch, "RESULT_WAIT_S", 1.0)
    runs = tmp_path / "runs"

    def task(p: int, runs: str) -> int:  # a closure: pickled by value for the worker process
        import pathlib
        import time

        marker = pathlib.Path(runs)
        if marker.exists():  # the recompute after the worker died: never finishes in time
            time.sleep(120)
        marker.write_text("ran")
        return p + 100

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        killed: list[str] = []

        def kill_holder() -> None:  # runs right before the finished result is taken
            if not killed:
                killed.append("yes")
                client.restart_workers(list(client.scheduler_info()["workers"]))

        results: dict[int, int] = {}
        t0 = time.monotonic()
        failures = run_partitions(
            client, task, [7], Dispatch(args=lambda p: (p, str(runs)),
            on_result=results.__setitem__, check=kill_holder, recover=lambda p: -p),
        )  # fmt: skip
        elapsed = time.monotonic() - t0
    assert killed
    assert failures == {}
    assert results == {7: -7}  # from recover: the task's own result went with its worker
    assert elapsed < 60


def test_a_cluster_whose_workers_are_all_gone_ends_the_run_not_hangs(monkeypatch) -> None:
    """Every worker gone and none back (dead workers whose nannies stopped, a scaled-down
    cluster): the pending partitions fail with a ClusterError after the grace, where the
    driver used to wait for ever."""
    from distributed import Client, LocalCluster

    monkeypatch.setenv("DPARALLEL_WORKER_WAIT", "2")  # the grace: 120 s unless set

    def slow(p: int) -> int:
        import time

        time.sleep(30)
        return p

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(1, timeout=30)
        gone: list[bool] = []

        def scale_to_nothing() -> None:  # the driver's check, every few seconds while it waits
            if not gone:
                gone.append(True)
                cluster.scale(0)

        t0 = time.monotonic()
        failures = run_partitions(client, slow, [0, 1], Dispatch(args=lambda p: (p,),
                                  check=scale_to_nothing))  # fmt: skip
        elapsed = time.monotonic() - t0
    assert gone and sorted(failures) == [0, 1]
    assert all(isinstance(exc, ClusterError) for exc in failures.values())
    assert "no worker alive for 2 s" in str(failures[0]) and "none joined" in str(failures[0])
    assert "DPARALLEL_WORKER_WAIT=SECONDS waits longer" in str(failures[0])
    assert elapsed < 25


def test_the_wait_for_a_worker_is_a_number_of_seconds_or_a_config_error(monkeypatch) -> None:
    from dparallel.cluster.dispatch import NO_WORKER_GRACE_S, no_worker_grace
    from dparallel.errors import ConfigError

    monkeypatch.delenv("DPARALLEL_WORKER_WAIT", raising=False)
    assert no_worker_grace() == NO_WORKER_GRACE_S == 120.0
    monkeypatch.setenv("DPARALLEL_WORKER_WAIT", "600")
    assert no_worker_grace() == 600.0
    for bad in ("0", "ten minutes"):
        monkeypatch.setenv("DPARALLEL_WORKER_WAIT", bad)
        with pytest.raises(ConfigError, match=f"DPARALLEL_WORKER_WAIT='{bad}'"):
            no_worker_grace()


@pytest.mark.slow
def test_a_cluster_without_workers_says_the_run_waits_and_runs_on_the_first_to_join() -> None:
    """A run started on a scheduler with no worker (an adaptive cluster scaled to zero, one
    whose workers are still starting) used to wait in silence, then fail; it says that it
    waits and for how long, and runs the partitions once a worker joins."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=0, processes=False, dashboard_address=":0")
    with cluster, Client(cluster) as client:
        checks: list[int] = []

        def join_late() -> None:  # the driver's check, every few seconds while it waits
            checks.append(1)
            if len(checks) == 2:  # after the first check found no worker
                cluster.scale(1)

        with pytest.warns(UserWarning, match=r"has no worker: the run waits up to 120 s"):
            failures = run_partitions(client, abs, [-3, -4], Dispatch(args=lambda p: (p,),
                                      check=join_late))  # fmt: skip
    assert failures == {} and len(checks) >= 2


@pytest.mark.integration
def test_a_scheduler_killed_mid_run_fails_the_pending_partitions_not_the_driver(tmp_path) -> None:
    """``dask scheduler`` SIGKILLed mid-run: distributed's ``wait`` raises
    ``FuturesCancelledError`` for the futures it cancelled; the partitions still pending come
    back as failures naming the lost connection (one line from ``raise_failures``), where the
    driver used to die of that traceback."""
    import os
    import signal

    from daskprocs import start_scheduler, start_worker, stop
    from distributed import Client

    def sleep_then(p: int) -> int:  # a closure: pickled by value for the worker process
        import time

        time.sleep(1.0)
        return p

    scheduler, address = start_scheduler(tmp_path)
    worker = start_worker(address, tmp_path / "worker.log")
    try:
        with Client(address, timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
            results: dict[int, int] = {}

            def kill_scheduler(p: int, result: int) -> None:  # on the first result
                results[p] = result
                os.killpg(scheduler.pid, signal.SIGKILL)

            t0 = time.monotonic()
            how = Dispatch(args=lambda p: (p,), on_result=kill_scheduler)
            failures = run_partitions(client, sleep_then, list(range(6)), how)
            elapsed = time.monotonic() - t0
    finally:
        stop(worker)
        stop(scheduler)
    assert len(results) == 1, failures
    assert sorted([*results, *failures]) == list(range(6))
    # what featurize_failures.raise_failures recognises as the lost scheduler
    assert all("scheduler-connection-lost" in str(exc) for exc in failures.values()), failures
    assert elapsed < 60


@pytest.mark.slow
def test_workers_that_die_whatever_they_run_are_not_tried_on_every_partition(tmp_path) -> None:
    """Every task kills its worker (as with a memory limit below what one partition needs):
    the driver used to rerun each partition alone, each costing the scheduler's allowed
    deaths (hours for hundreds of partitions); it now stops after KILLING_IN_A_ROW."""
    from dparallel.cluster.dispatch import KILLING_IN_A_ROW

    runs = tmp_path / "runs"

    def die(p: int, runs: str) -> int:  # a closure: pickled by value for the worker process
        import os

        with open(runs, "a") as fh:
            fh.write(f"{p}\n")
        os._exit(1)

    with _one_worker_whose_death_is_final() as client:
        failures = run_partitions(
            client, die, list(range(7)), Dispatch(args=lambda p: (p, str(runs)))
        )
    assert sorted(failures) == list(range(7))
    killed = [p for p, exc in failures.items() if killed_worker(exc)]
    skipped = [p for p, exc in failures.items() if not killed_worker(exc)]
    assert len(killed) == KILLING_IN_A_ROW and len(skipped) == 7 - KILLING_IN_A_ROW, failures
    assert all(isinstance(failures[p], ClusterError) for p in skipped)
    assert "the workers die whatever they run" in str(failures[skipped[0]])
    reruns = runs.read_text().split()[-KILLING_IN_A_ROW:]  # the last runs: those rerun alone
    assert sorted(map(int, reruns)) == sorted(killed)


@pytest.mark.slow
def test_partitions_rerun_alone_after_killing_ones_in_a_row_once_one_ran_fine(tmp_path) -> None:
    """Three neighbouring partitions that each kill their worker (too large for a memory
    limit) while others run fine: the workers can run a partition, so every suspect is
    still rerun alone and the innocent ones after the three finish (they were failed as
    'not rerun alone', and rerunning the command repeated the same round)."""
    from dparallel.cluster.dispatch import KILLING_IN_A_ROW

    killers = set(range(1, 1 + KILLING_IN_A_ROW))

    def task(p: int, killers: frozenset) -> int:  # a closure: pickled by value
        import os

        if p in killers:
            os._exit(1)
        return p

    done: list[int] = []
    with _one_worker_whose_death_is_final() as client:
        how = Dispatch(
            args=lambda p: (p, frozenset(killers)), on_result=lambda p, r: done.append(r)
        )
        failures = run_partitions(client, task, list(range(len(killers) + 3)), how)
    assert sorted(failures) == sorted(killers), failures
    assert all(killed_worker(exc) for exc in failures.values()), failures
    assert sorted(done) == sorted(set(range(len(killers) + 3)) - killers)


@contextlib.contextmanager
def _one_worker_whose_death_is_final() -> Iterator[Any]:
    """A client of a one-process local cluster where a task that kills its worker is
    given up at once (``KilledWorker``, no other attempt)."""
    import dask
    from distributed import Client, LocalCluster

    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_workers_killed_for_memory_as_they_start_end_the_run_not_hang_it() -> None:
    """A memory limit below what a worker needs at rest: its nanny kills each new worker
    as it starts, before it holds a task long enough for Dask to count a death against
    it, so no KilledWorker ever came and the driver waited for ever (seen with
    ``dparallel featurize --memory-limit 60MiB``: killed by ``timeout`` after 5 minutes)."""
    from distributed import Client, LocalCluster

    from dparallel.errors import WorkerKilledError

    def slow(p: int) -> int:  # a closure: pickled by value for the worker process
        import time

        time.sleep(1.0)
        return p

    t0 = time.monotonic()
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            memory_limit="200MiB",
            dashboard_address=":0",
            preload=[str(Path(__file__).with_name("_ballast_preload.py"))],
        ) as cluster,
        Client(cluster) as client,
    ):
        failures = run_partitions(client, slow, [0, 1, 2, 3], Dispatch(args=lambda p: (p,)))
    assert time.monotonic() - t0 < 90
    assert sorted(failures) == [0, 1, 2, 3], failures
    for exc in failures.values():
        assert isinstance(exc, WorkerKilledError) and exc.memory, exc
        assert "killed for memory" in str(exc) and "of its 200.00 MiB limit" in str(exc), exc


def _restart_on_first_result(address: str, outlived: int, monkeypatch) -> tuple[dict, dict]:
    """Run six sleeping partitions while another client of the cluster (another user's)
    calls ``Client.restart`` at the first result; (results, failures)."""
    import warnings

    from distributed import Client

    from dparallel.cluster import dispatch

    monkeypatch.setattr(dispatch, "RESTARTS_OUTLIVED", outlived, raising=False)

    def sleep_then(p: int) -> int:  # a closure: pickled by value for the worker process
        import time

        time.sleep(0.5)
        return p

    with Client(address, timeout=30) as ours, Client(address, timeout=30) as theirs:
        ours.wait_for_workers(1, timeout=60)
        results: dict[int, int] = {}

        def restart_once(p: int, result: int) -> None:
            if not results:
                theirs.restart(timeout=60)
            results[p] = result

        how = Dispatch(args=lambda p: (p,), on_result=restart_once)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            failures = run_partitions(ours, sleep_then, list(range(6)), how)
    if outlived:
        assert any("was restarted (Client.restart" in str(w.message) for w in said), said
    return results, failures


@pytest.mark.integration
def test_a_restart_by_another_client_reruns_the_cancelled_partitions(tmp_path, monkeypatch):
    """``Client.restart`` by another client of a shared cluster cancels every task of the
    run: those partitions are submitted again (the workers come back with the restart), and
    the run ends with every result, where each used to fail with FuturesCancelledError. A
    run that outlives no restart fails those partitions with a SchedulerRestartedError,
    which featurize says in one line."""
    from daskprocs import start_scheduler, start_worker, stop

    from dparallel.errors import SchedulerRestartedError

    scheduler, address = start_scheduler(tmp_path)
    worker = start_worker(address, tmp_path / "worker.log")
    try:
        results, failures = _restart_on_first_result(address, 3, monkeypatch)
        assert failures == {} and sorted(results) == list(range(6))
        results, failures = _restart_on_first_result(address, 0, monkeypatch)
    finally:
        stop(worker)
        stop(scheduler)
    assert failures and sorted([*results, *failures]) == list(range(6))
    assert all(isinstance(exc, SchedulerRestartedError) for exc in failures.values()), failures
    assert all("restarted 1 time during" in str(exc) for exc in failures.values()), failures
