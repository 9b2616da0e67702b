"""A scheduler lost mid-run is one short message whose counts add up to the partitions."""

from __future__ import annotations

from pathlib import Path

import pytest

from dparallel.errors import ClusterError, PartitionFailedError
from dparallel.store import Store
from dparallel.workflow.featurize_failures import raise_failures


def _store(done: list[int], total: int) -> Store:
    """A local store of ``total`` partitions, ``done`` of them done, without opening one."""

    class _Fake(Store):
        def __init__(self) -> None:
            pass

        def done_partitions(self) -> list[int]:
            return done

        def partition_range(self, p: int) -> tuple[int, int]:
            return p, p + 1

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


def test_a_done_partition_is_no_failure() -> None:
    raise_failures(_store([0, 1], 2), {1: RuntimeError("future lost, marker written")})
    with pytest.raises(PartitionFailedError, match="partition 1"):
        raise_failures(_store([0], 2), {1: RuntimeError("boom")})
