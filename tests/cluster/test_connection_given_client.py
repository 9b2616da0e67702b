"""connect() with a client the user made (a script's or a notebook's own cluster): used as
given, never closed, its workers left as they were, an asynchronous one refused."""

from __future__ import annotations

import asyncio
import os

import pytest
from distributed import Client, LocalCluster

from dparallel.cluster import ClusterSpec, connect, expected_workers
from dparallel.errors import ClusterError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

_BUDGET = ("DPARALLEL_TORCH_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _worker_state(dask_worker) -> tuple[dict[str, str | None], list[str]]:
    """A worker's thread budget variables and its plugins' names."""
    return {v: os.environ.get(v) for v in _BUDGET}, sorted(dask_worker.plugins)


@pytest.fixture
def own_client():
    """A user's own one-worker cluster and client."""
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def test_a_given_clients_workers_get_their_own_budget_back(own_client) -> None:  # noqa: ANN001
    client = own_client
    before = client.run(_worker_state)
    with connect(ClusterSpec(torch_threads=3), client=client) as handle:
        during = client.run(_worker_state)
        assert all(env["DPARALLEL_TORCH_THREADS"] == "3" for env, _ in during.values())
    assert client.run(_worker_state) == before  # no budget, no plugin left behind
    assert handle.client is client and client.status == "running"
    assert client.submit(sum, [1, 2]).result(timeout=30) == 3


def test_a_budget_another_handle_set_stays_until_that_one_closes(own_client) -> None:  # noqa: ANN001
    """Two runs on one client (notebook threads, a run's featurize inside it): the one that
    found the budget set leaves it when it closes; the one that set it removes it."""
    client = own_client
    before = client.run(_worker_state)
    with connect(ClusterSpec(torch_threads=3), client=client):
        with connect(ClusterSpec(torch_threads=3), client=client):
            pass
        still = client.run(_worker_state)
        assert all(env["DPARALLEL_TORCH_THREADS"] == "3" for env, _ in still.values())
    assert client.run(_worker_state) == before


def test_an_asynchronous_client_is_a_cluster_error_not_a_coroutine() -> None:
    async def given() -> list[str]:
        errors = []
        async with (
            LocalCluster(
                n_workers=1, processes=False, asynchronous=True, dashboard_address="127.0.0.1:0"
            ) as cluster,
            Client(cluster, asynchronous=True) as client,
        ):
            for call in (
                lambda: connect(client=client),
                lambda: connect(ClusterSpec(torch_threads=2), client=client),
                lambda: expected_workers(client=client),
            ):
                with pytest.raises(ClusterError, match="asynchronous") as info:
                    call()
                errors.append(str(info.value))
            assert await client.submit(sum, [1, 2]) == 3  # the user's client still works
        return errors

    errors = asyncio.run(asyncio.wait_for(given(), 60))
    assert all("asyncio.to_thread" in e for e in errors)


def test_a_closed_client_is_a_cluster_error() -> None:
    with LocalCluster(n_workers=1, processes=False, dashboard_address="127.0.0.1:0") as cluster:
        client = Client(cluster)
        client.close()
        with pytest.raises(ClusterError, match="closed"):
            connect(client=client)


def test_a_default_client_left_unused_is_said_and_stays_the_default(caplog) -> None:  # noqa: ANN001
    from distributed import default_client

    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address="127.0.0.1:0") as cluster,
        Client(cluster) as mine,  # a notebook's Client(): the default client
    ):
        with caplog.at_level("WARNING", logger="dparallel.cluster.given_client"):
            spec = ClusterSpec(n_workers=1, dashboard_address="127.0.0.1:0")
            with connect(spec) as handle:
                assert handle.source == "local" and handle.client is not mine
        said = [r.getMessage() for r in caplog.records if "does not use" in r.getMessage()]
        assert len(said) == 1 and mine.scheduler.address in said[0]
        assert "FeaturizeOptions(client=client)" in said[0]
        assert default_client() is mine and mine.status == "running"


def test_a_cluster_object_a_mapping_or_an_address_given_for_client_or_spec_is_named() -> None:
    # before: "'SchedulerInfo' object is not callable", "'dict' object has no attribute
    # 'kind'", "'str' object has no attribute 'scheduler_info'"
    from dparallel.errors import ArgumentTypeError

    with LocalCluster(n_workers=1, processes=False, dashboard_address="127.0.0.1:0") as cluster:
        wrong = [
            ({"client": cluster}, "client is a LocalCluster, not a distributed.Client: give "
                                  "client=Client(cluster) (or cluster.get_client())"),
            ({"spec": cluster}, "cluster is a LocalCluster, not a dparallel.cluster.ClusterSpec: "
                                "give client=Client(cluster)"),
            ({"spec": {"n_workers": 1}}, "cluster is a dict, not a dparallel.cluster.ClusterSpec: "
                                         "give ClusterSpec(**settings)"),
            ({"client": "tcp://h:8786"}, "client is a str, not a distributed.Client: give "
                                         "client=Client('tcp://h:8786'), or scheduler='tcp://h:8786'"),
        ]  # fmt: skip
        for given, said in wrong:
            for call in (connect, expected_workers):
                with pytest.raises(ArgumentTypeError) as refused:
                    call(**given)
                assert str(refused.value).startswith(said)
