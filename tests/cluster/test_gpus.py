"""GPU workers: which GPUs are visible, a clear error for too many, the partitions marked."""

from __future__ import annotations

import argparse

import pytest
from pydantic import ValidationError

from dparallel.cluster import ClusterSpec
from dparallel.cluster.gpus import check_gpus, gpu_partitions, visible_gpus, worker_gpus
from dparallel.errors import ClusterError


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert visible_gpus() == ["2", "3"]
    assert check_gpus(1) == ["2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


def test_more_gpus_than_visible_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ClusterError, match=r"--gpus 2 .* 1 GPU\(s\) are visible"):
        check_gpus(2)


def test_local_cluster_with_more_gpus_than_visible_refuses_before_starting(monkeypatch) -> None:
    from dparallel.cluster import connect

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ClusterError, match="--gpus 1"):
        connect(ClusterSpec(n_workers=1, gpus=1, dashboard_address="127.0.0.1:0"))


def test_gpus_belong_to_a_local_cluster() -> None:
    assert ClusterSpec(gpus=2).gpus == 2
    with pytest.raises(ValidationError, match="resources GPU=1"):
        ClusterSpec(kind="address", address="tcp://h:8786", gpus=1)


def test_cli_gpus_reach_the_spec_or_are_refused_up_front(monkeypatch) -> None:
    from dparallel.cli._options import add_cluster_arguments, cluster_kwargs

    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    spec = cluster_kwargs(parser.parse_args(["--local", "4", "--gpus", "2"]))["cluster"]
    assert (spec.n_workers, spec.gpus) == (4, 2)
    assert cluster_kwargs(parser.parse_args([]))["cluster"] is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ClusterError, match="no GPU is visible here"):
        cluster_kwargs(parser.parse_args(["--gpus", "1"]))


def test_expected_workers_count_gpu_workers() -> None:
    from dparallel.cluster import expected_workers

    assert expected_workers(ClusterSpec(n_workers=3, gpus=1)) == 4


@pytest.mark.parametrize(
    ("n", "gpu", "cpu", "share", "expected"),
    [
        (8, 0, 4, None, set()),
        (8, 1, 1, None, {1, 3, 5, 7}),
        (8, 1, 3, None, {3, 7}),
        (4, 1, 0, None, {0, 1, 2, 3}),
        (6, 1, 5, 0.5, {1, 3, 5}),
    ],
)
def test_gpu_partitions_spread_a_share_evenly(n, gpu, cpu, share, expected) -> None:
    assert gpu_partitions(list(range(n)), gpu, cpu, share) == expected


def test_outside_a_worker_there_is_no_gpu() -> None:
    assert worker_gpus() == 0.0


@pytest.mark.slow
def test_local_cluster_starts_one_gpu_worker_per_device_beside_the_cpu_workers(
    monkeypatch,
) -> None:
    import os

    from dparallel.cluster import connect
    from dparallel.cluster.gpus import gpu_worker_addresses

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")  # devices need not exist to be handed out
    with connect(ClusterSpec(n_workers=1, gpus=2, dashboard_address="127.0.0.1:0")) as handle:
        handle.client.wait_for_workers(3, timeout=120)
        gpu = gpu_worker_addresses(handle.client)
        assert len(gpu) == 2 and handle.n_workers == 3
        seen = handle.client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"), workers=gpu)
        assert sorted(seen.values()) == ["5", "7"]
        in_tasks = [
            handle.client.submit(worker_gpus, workers=[a], pure=False).result(timeout=60)
            for a in gpu
        ]
        assert in_tasks == [1.0, 1.0]  # what a task on a GPU worker sees
