"""Which cluster a command connects to: one pure decision (``connection_kind``) that
``connect``, ``expected_workers`` and the CLI's early forkserver start share; tested as a
precedence table, without starting a cluster."""

from __future__ import annotations

import pytest

from dparallel.cluster import ClusterSpec, expected_workers
from dparallel.cluster.where import connection_kind

ENV = {"DASK_SCHEDULER_ADDRESS": "tcp://10.0.0.1:8786"}
ADDRESS = ClusterSpec(kind="address", address="tcp://10.0.0.2:8786", n_workers=5)


@pytest.mark.parametrize(
    ("spec", "where", "env", "expected"),
    [
        (None, {}, {}, "local"),
        (ClusterSpec(n_workers=2), {}, {}, "local"),
        (None, {}, ENV, "env"),  # the variable replaces the default local cluster
        (None, {}, {"DASK_SCHEDULER_ADDRESS": ""}, "local"),  # empty: not set
        (ClusterSpec(n_workers=2), {}, ENV, "env"),  # and a spec's local kind
        (ADDRESS, {}, ENV, "env"),  # and a spec's address
        (ADDRESS, {}, {}, "address"),
        (ClusterSpec(kind="slurm"), {}, {}, "slurm"),
        (None, {"scheduler": "tcp://h:1"}, ENV, "scheduler"),  # --scheduler first
        (ADDRESS, {"scheduler_file": "s.json"}, ENV, "scheduler_file"),
        (None, {"scheduler": "tcp://h:1", "scheduler_file": "s.json"}, {}, "scheduler"),
        (ADDRESS, {"client": object(), "scheduler": "tcp://h:1"}, ENV, "client"),
    ],
)
def test_precedence(spec, where, env, expected) -> None:
    assert connection_kind(spec, env=env, **where) == expected


def test_reads_this_process_environment_by_default(monkeypatch) -> None:
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://10.0.0.1:8786")
    assert connection_kind() == "env"
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS")
    assert connection_kind() == "local"


@pytest.mark.parametrize("env", [{}, ENV])
def test_expected_workers_follows_the_same_decision(monkeypatch, env) -> None:
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    local = ClusterSpec(n_workers=3, gpus=1)
    for spec, where in [(local, {}), (ADDRESS, {}), (local, {"scheduler": "tcp://h:1"})]:
        kind = connection_kind(spec, **where)
        expected = 4 if kind == "local" else spec.n_workers  # 3 CPU + 1 GPU worker, else given
        assert expected_workers(spec, **where) == expected


def test_expected_workers_of_a_slurm_cluster_are_its_jobs_processes(monkeypatch) -> None:
    """`kind: slurm` starts `jobs` jobs of `cores` single-threaded worker processes each
    (docs/deploy.md): the partition size is derived for those, not for unknown workers."""
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    spec = ClusterSpec(kind="slurm", slurm={"cores": 16, "jobs": 4})
    assert expected_workers(spec) == 64
    assert expected_workers(spec, scheduler="tcp://h:1") is None  # the address wins


def test_expected_workers_of_a_client_count_the_workers_its_cluster_asked_for() -> None:
    """`dparallel run` featurizes through its own client: a SLURM cluster's jobs are still
    queued then (no worker registered), and the partition size was derived for unknown
    workers (the largest); its cluster object's plan names them."""
    from types import SimpleNamespace

    from distributed import Client

    class _Client(Client):  # a client of these workers and plan, connected to nothing
        asynchronous = False  # type: ignore[assignment]
        status = "running"

        def __init__(self, workers: dict, cluster: SimpleNamespace | None) -> None:
            self.workers, self.cluster = workers, cluster

        def scheduler_info(self, **_) -> dict:  # noqa: ANN003
            return {"workers": self.workers}

        def __del__(self) -> None:
            pass

    def client(registered: int, plan: set[str] | None) -> Client:
        workers = {f"tcp://w{i}": {} for i in range(registered)}
        return _Client(workers, None if plan is None else SimpleNamespace(plan=plan))

    queued = {f"job-{j}-{w}" for j in range(2) for w in range(3)}  # 2 jobs × 3 processes
    assert expected_workers(client=client(0, queued)) == 6
    assert expected_workers(client=client(1, queued)) == 6
    assert expected_workers(client=client(4, set())) == 4  # adaptive, scaled beyond its plan
    assert expected_workers(client=client(2, None)) == 2  # a client of an address
    assert expected_workers(client=client(0, None)) is None
