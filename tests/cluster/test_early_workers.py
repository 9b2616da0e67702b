"""``connect(return_early=True)``: the handle comes once the first local worker runs; the
others (GPU workers too) join in the background and take the tasks that wait for them."""

from __future__ import annotations

import os

import pytest

from dparallel.cluster import ClusterSpec, connect
from dparallel.cluster.gpus import GPU_RESOURCE, gpu_worker_addresses

pytestmark = pytest.mark.slow


def test_early_handle_runs_tasks_and_gets_every_worker(monkeypatch) -> None:
    from dparallel.cluster import local_cluster

    monkeypatch.setattr(local_cluster, "CPU_COUNT", 64)  # a node with cores for every worker
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    spec = ClusterSpec(n_workers=3, gpus=1, dashboard_address="127.0.0.1:0")
    with connect(spec, return_early=True) as handle:
        assert handle._starting is not None  # the others start in the background
        assert (handle.planned_workers, handle.planned_gpus) == (4, 1)
        # submitted before the GPU worker may exist: waits for it on the scheduler
        on_gpu = handle.client.submit(
            lambda: os.environ.get("CUDA_VISIBLE_DEVICES"), resources={GPU_RESOURCE: 1},
            pure=False,
        )  # fmt: skip
        assert handle.client.submit(lambda x: x + 1, 1, pure=False).result(timeout=120) == 2
        assert on_gpu.result(timeout=120) == "3"
        assert handle.wait_for_workers(timeout=120)
        assert handle.n_workers == 4
        assert len(gpu_worker_addresses(handle.client)) == 1


@pytest.mark.parametrize("early", [False, True])
def test_blocking_connect_or_more_workers_than_cores_has_every_worker_at_once(
    monkeypatch, early
) -> None:
    from dparallel.cluster import local_cluster

    monkeypatch.setattr(local_cluster, "CPU_COUNT", 1)  # return_early: 2 workers > 1 core
    spec = ClusterSpec(n_workers=2, dashboard_address="127.0.0.1:0")
    with connect(spec, return_early=early) as handle:
        assert handle.n_workers == 2
        assert handle.wait_for_workers(timeout=0)
        assert (handle.planned_workers, handle.planned_gpus) == (2, 0)


def test_early_client_connects_while_the_first_worker_starts() -> None:
    """The client is on the scheduler before any worker registers (not after the first, on
    the path to the first task); the handle still comes with that worker running."""
    spec = ClusterSpec(n_workers=1, dashboard_address="127.0.0.1:0")
    with connect(spec, return_early=True) as handle:
        assert handle.n_workers == 1
        events = handle.client.get_events("all")
        actions = [
            e["action"] for _, e in events if e.get("action") in ("add-client", "add-worker")
        ]
        assert actions[:2] == ["add-client", "add-worker"]
        assert handle.client.cluster is handle.cluster
        assert handle.client.submit(lambda x: x + 1, 1, pure=False).result(timeout=120) == 2
