"""raise_failures: a scheduler lost mid-run is one short message whose counts add up to the
partitions; workers that died running partitions say what to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from dparallel.errors import ClusterError, PartitionFailedError, StoreError, WorkerKilledError
from dparallel.store import Store
from dparallel.workflow.featurize_failures import raise_failures


def _store(done: list[int], total: int, per_partition: int = 1) -> Store:
    """A local store of ``total`` partitions of ``per_partition`` structures each, ``done``
    of them done, without opening one."""

    class _Fake(Store):
        def __init__(self) -> None:
            pass

        def done_partitions(self) -> list[int]:
            return done

        def partition_range(self, p: int) -> tuple[int, int]:
            return p * per_partition, (p + 1) * per_partition

        n_partitions = total  # type: ignore[assignment]
        root = None  # type: ignore[assignment]
        path = Path("/data/s.zarr")  # type: ignore[assignment]

    return _Fake()


class FuturesCancelledError(Exception):
    pass


def test_lost_scheduler_is_one_message_with_consistent_counts() -> None:
    lost = FuturesCancelledError(
        "1 Future cancelled:\nReasons:\n1 Future cancelled for reason: scheduler-connection-lost."
    )
    failures = {p: lost for p in range(2, 10)}  # partition 2 was marked done all the same
    with pytest.raises(ClusterError) as info:
        raise_failures(_store([0, 1, 2], 10), failures)
    text = str(info.value)
    assert "3 of 10 partitions" in text and "7 were not computed" in text
    assert "\n" not in text and "rerun the same command" in text


def test_a_scheduler_restarted_too_often_is_one_message_with_consistent_counts() -> None:
    """Partitions cancelled by more restarts of the scheduler than a run outlives were one
    line each of Dask's FuturesCancelledError text (49 of them in a run)."""
    from dparallel.errors import SchedulerRestartedError

    why = SchedulerRestartedError("tcp://h:8786 was restarted 4 times during the run (…)")
    with pytest.raises(SchedulerRestartedError) as info:
        raise_failures(_store([0, 1, 2], 10), {p: why for p in range(2, 10)})
    text = str(info.value)
    assert text.startswith("tcp://h:8786 was restarted 4 times") and "\n" not in text
    assert "3 of 10 partitions" in text and "7 were not computed" in text
    assert "rerun the same command" in text


def test_a_done_partition_is_no_failure() -> None:
    raise_failures(_store([0, 1], 2), {1: RuntimeError("future lost, marker written")})
    with pytest.raises(PartitionFailedError, match="partition 1"):
        raise_failures(_store([0], 2), {1: RuntimeError("boom")})


@pytest.mark.parametrize(
    ("names", "memory_option", "size_option"),
    [
        (None, "--memory-limit", "--partition-atoms"),  # dparallel featurize
        (
            {"memory_limit": "cluster.memory_limit", "partition_atoms": "partitioning.atoms"},
            "cluster.memory_limit",
            "partitioning.atoms",
        ),  # dparallel run
    ],
)
def test_workers_killed_for_memory_name_the_partition_and_the_options_to_change(
    names, memory_option, size_option
) -> None:
    """It was Dask's bare KilledWorker text ("Attempted to run task … on 4 different
    workers …"), with no word of memory or of what to change."""
    died = WorkerKilledError("its worker died on each of 4 attempts to run it", memory=True)
    with pytest.raises(PartitionFailedError) as info:
        raise_failures(_store([0, 1, 3], 4, per_partition=3), {2: died}, names)
    first, line = str(info.value).split("\n")
    assert first.startswith("1 of 4 partitions failed; 3 done partitions are kept;")
    assert "ran out of memory" in first and "rerun the same command" in first
    assert f"more memory with {memory_option}" in first and f"smaller with {size_option}" in first
    assert line == "partition 2 (structures 6..8) failed: WorkerKilledError: " + str(died)
    killed = WorkerKilledError("its worker died on each of 4 attempts to run it", memory=False)
    with pytest.raises(PartitionFailedError) as info:
        raise_failures(_store([0, 1, 3], 4, per_partition=3), {2: killed}, names)
    assert "ran out of memory" not in str(info.value)
    assert f"if it was memory, give each worker more memory with {memory_option}" in str(info.value)


def test_a_killed_partition_of_one_structure_asks_for_memory_not_a_partition_size() -> None:
    """A partition that is one structure (too large alone for a worker) cannot be split by
    any partition size: the advice was "or make partitions smaller with --partition-atoms
    and --overwrite", which recomputes everything and fails the same way."""
    died = WorkerKilledError("its worker died on each of 4 attempts to run it", memory=True)
    with pytest.raises(PartitionFailedError) as info:
        raise_failures(_store([0, 1, 3], 4), {2: died})
    first = str(info.value).split("\n")[0]
    assert "more memory with --memory-limit" in first and "rerun the same command" in first
    assert "--partition-atoms" not in first and "one structure" in first


@pytest.mark.parametrize(
    ("code", "why"), [(30, "Read-only file system"), (13, "Permission denied")]
)
def test_a_store_that_cannot_be_written_is_one_line_naming_it_and_the_cause(code, why) -> None:
    """It was one line per partition (131 of them for a store remounted read-only
    mid-run), each ``OSError: [Errno 30] Read-only file system``, the store named nowhere."""
    failures = {p: OSError(code, why) for p in range(2, 10)}
    with pytest.raises(StoreError) as info:
        raise_failures(_store([0, 1], 10), failures)
    assert str(info.value) == (
        f"cannot write /data/s.zarr: {why}: 8 of 10 partitions could not be written (2 done "
        "partitions are kept); make the store writable and rerun the same command to compute "
        "only the rest"
    )


def test_one_cause_of_many_partitions_is_said_once() -> None:
    """Partitions left without a worker (the same ClusterError for each) printed one line
    each: 18 lines of the same text in a run on a SLURM queue that never started a job."""
    from dparallel.errors import ClusterError

    none = ClusterError("no worker alive for 120 s to run it on (…)")
    failures = {p: none for p in [2, 3, 4, 5, 7, 9, 10]} | {6: RuntimeError("boom")}
    with pytest.raises(PartitionFailedError) as info:
        raise_failures(_store([0, 1], 11, per_partition=2), failures)
    first, *lines = str(info.value).split("\n")
    assert first.startswith("8 of 11 partitions failed; 2 done partitions are kept;")
    assert lines == [
        f"partitions 2–5, 7, 9–10 (7) failed: ClusterError: {none}",
        "partition 6 (structures 12..13) failed: RuntimeError: boom",
    ]
