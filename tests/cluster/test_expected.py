"""What a cluster will have, known before it starts, against the cluster Dask then starts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dparallel.cluster import ClusterSpec, connect, expected_worker_memory, expected_workers
from dparallel.cluster.expected import smallest_memory_limit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.mark.parametrize("early", [False, True])
@pytest.mark.parametrize("limit", ["1GiB", 0.25, None])
def test_a_local_clusters_worker_memory_is_the_limit_its_workers_get(limit, early, monkeypatch):
    """The memory limit derived before the start equals the one each started worker
    reports to its scheduler (a given amount, a fraction of memory, Dask's default), also
    when the first worker starts alone and the rest after it (``dparallel featurize``'s
    start: Dask's default gave every worker the whole machine then)."""
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    spec = ClusterSpec(n_workers=2, memory_limit=limit, dashboard_address=":0")
    before = expected_worker_memory(spec)
    with connect(spec, return_early=early) as handle:
        handle.client.wait_for_workers(2, timeout=120)
        workers = handle.client.scheduler_info(n_workers=-1)["workers"].values()
        started = {w["memory_limit"] for w in workers}
        assert expected_workers(spec) == len(workers) == 2
        assert expected_worker_memory(client=handle.client) == before
    assert started == {before}


def test_workers_started_elsewhere_have_no_memory_known_until_asked(monkeypatch):
    """A scheduler's address names no limit; a client's workers' smallest one counts."""
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    assert expected_worker_memory(ClusterSpec(), scheduler="tcp://127.0.0.1:1") is None
    workers = {"a": {"memory_limit": 4e9}, "b": {"memory_limit": 2e9}, "c": {"memory_limit": 0}}
    client = SimpleNamespace(scheduler_info=lambda **_: {"workers": workers})
    assert smallest_memory_limit(client) == 2e9  # type: ignore[arg-type]
