"""ClusterSpec validation, connect() resolution without a scheduler, torch thread helpers."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from pydantic import ValidationError

from dparallel.cluster import (
    ClusterSpec,
    TLSSpec,
    TorchThreadsPlugin,
    configured_torch_threads,
    connect,
    ensure_torch_threads,
    torch_threads,
)
from dparallel.cluster.threads import worker_env
from dparallel.errors import ClusterError


def test_defaults_are_local_single_threaded_loopback() -> None:
    spec = ClusterSpec()
    assert spec.kind == "local"
    assert spec.n_workers is None
    assert spec.threads_per_worker == 1
    assert spec.torch_threads is None  # local workers: 1; remote workers keep their own
    assert spec.dashboard_address == "127.0.0.1:8787"


def test_unknown_key_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError, match="n_worker"):
        ClusterSpec(n_worker=2)
    with pytest.raises(ValidationError, match="walltim"):
        ClusterSpec(kind="slurm", slurm={"walltim": "01:00:00"})


@pytest.mark.parametrize(
    ("field", "value"),
    [("kind", "kubernetes"), ("n_workers", 0), ("torch_threads", 0), ("connect_timeout", 0)],
)
def test_invalid_values_fail(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        ClusterSpec(**{field: value})


def test_address_kind_needs_an_address() -> None:
    with pytest.raises(ValidationError, match=r"neither cluster.address nor"):
        ClusterSpec(kind="address")
    assert ClusterSpec(kind="address", address="tcp://h:8786").address == "tcp://h:8786"


def test_walltime_format_checked() -> None:
    with pytest.raises(ValidationError, match="walltime"):
        ClusterSpec(kind="slurm", slurm={"walltime": "one hour"})
    assert ClusterSpec(kind="slurm", slurm={"walltime": "1-02:00:00"}).slurm.walltime


def test_worker_env_carries_thread_budget() -> None:
    env = worker_env(ClusterSpec(torch_threads=3))
    assert env == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "DPARALLEL_TORCH_THREADS": "3"}


def test_missing_scheduler_file_is_a_cluster_error(tmp_path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ClusterError, match=r"scheduler file .*nope\.json.* does not exist"):
        connect(scheduler_file=missing)


def test_scheduler_file_without_address(tmp_path) -> None:
    bad = tmp_path / "s.json"
    bad.write_text('{"type": "Scheduler"}')
    with pytest.raises(ClusterError, match="has no 'address'"):
        connect(scheduler_file=bad)


def test_missing_certificate_is_named(tmp_path) -> None:
    spec = ClusterSpec(
        kind="address",
        address="tls://127.0.0.1:1",
        tls=TLSSpec(ca_file=tmp_path / "ca.pem", cert=tmp_path / "c.pem"),
    )
    with pytest.raises(ClusterError, match=r"cluster.tls.ca_file: .*ca\.pem.* does not exist"):
        connect(spec)


def test_slurm_without_jobqueue_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # makes the import fail
    with pytest.raises(ClusterError, match=r"pip install 'dparallel\[slurm\]'"):
        connect(ClusterSpec(kind="slurm"))


def _fake_jobqueue(monkeypatch) -> dict:
    """A stand-in dask_jobqueue whose SLURMCluster records what connect() passes and whose
    sbatch refuses every job as dask-jobqueue reports it (no SLURM here); what it saw."""
    seen: dict = {}

    class FakeSLURMCluster:
        def __init__(self, **kwargs):
            seen.update(kwargs)
            self.worker_spec: dict = {}
            self.workers: dict = {}

        def new_worker_spec(self):
            return {f"job-{len(self.worker_spec)}": {}}

        def _correct_state(self):
            pass

        def sync(self, method):
            seen["jobs"] = len(self.worker_spec)
            raise RuntimeError("Command exited with non-zero exit code.\nstderr:\nno sbatch here")

        def close(self):
            seen["closed"] = True

    monkeypatch.setitem(
        sys.modules, "dask_jobqueue", types.SimpleNamespace(SLURMCluster=FakeSLURMCluster)
    )
    return seen


def test_slurm_options_reach_jobqueue(monkeypatch) -> None:
    seen = _fake_jobqueue(monkeypatch)
    spec = ClusterSpec(
        kind="slurm",
        torch_threads=4,
        slurm={"queue": "cpu", "cores": 8, "memory": "32GB", "walltime": "02:00:00", "jobs": 3},
    )
    with pytest.raises(ClusterError, match="SLURM refuses the workers' job: no sbatch here;"):
        connect(spec)
    assert seen["queue"] == "cpu" and seen["cores"] == 8 and seen["processes"] == 8
    assert seen["memory"] == "32GB" and seen["walltime"] == "02:00:00" and seen["jobs"] == 3
    assert "export DPARALLEL_TORCH_THREADS=4" in seen["job_script_prologue"]
    assert seen["scheduler_options"]["preload"] == ["dparallel.dashboard.preload"]
    assert seen["closed"]  # its scheduler does not outlive the error


def test_slurm_job_script_prologue_is_added_after_the_thread_exports(monkeypatch) -> None:
    """docs/deploy.md: without a shared scratch the jobs get AWS_* through
    ``job_script_prologue``; the workflow's lines follow dparallel's own exports."""
    seen = _fake_jobqueue(monkeypatch)
    lines = ["export AWS_PROFILE=lab", "module load gcc"]
    spec = ClusterSpec(kind="slurm", torch_threads=2, slurm={"job_script_prologue": lines})
    with pytest.raises(ClusterError, match="no sbatch"):
        connect(spec)
    prologue = seen["job_script_prologue"]
    assert prologue[-2:] == lines and "export DPARALLEL_TORCH_THREADS=2" in prologue[:-2]
    assert ClusterSpec().slurm.job_script_prologue == []


def test_configured_torch_threads_reads_env(monkeypatch) -> None:
    monkeypatch.setenv("DPARALLEL_TORCH_THREADS", "3")
    assert configured_torch_threads() == 3
    monkeypatch.setenv("DPARALLEL_TORCH_THREADS", "x")
    assert configured_torch_threads(default=2) == 2
    monkeypatch.delenv("DPARALLEL_TORCH_THREADS")
    assert configured_torch_threads() == 1


def test_torch_threads_context_restores() -> None:
    before = torch.get_num_threads()
    target = 2 if before != 2 else 1
    with torch_threads(target) as n:
        assert n == target
        assert torch.get_num_threads() == target
    assert torch.get_num_threads() == before


def test_ensure_torch_threads_sets_this_thread() -> None:
    before = torch.get_num_threads()
    try:
        assert ensure_torch_threads(1) == 1
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_plugin_rejects_zero() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        TorchThreadsPlugin(0)


@pytest.mark.parametrize("text", ["2GiB", "'2 GB'", "auto", "2e9", "2000000000", "0.25", "1"])
def test_memory_limit_takes_what_dask_takes(text: str) -> None:
    """YAML's ``2e9`` is a number of bytes, as Dask reads it (not refused as no string)."""
    import logging

    from distributed.worker_memory import parse_memory_limit

    from dparallel.config import parse_value

    value = parse_value(text, "memory_limit")
    spec = ClusterSpec(memory_limit=value)
    limit = parse_memory_limit(spec.memory_limit, 1, logger=logging.getLogger(__name__))
    assert limit is not None and limit > 0


@pytest.mark.parametrize("value", ["garbage", "50%", 0, -1, 1.5, 1000])
def test_memory_limit_refuses_what_dask_misreads(value: object) -> None:
    """A typo fails in the spec, and 1.5 or 1000 (Dask: 1 and 1000 bytes) is refused."""
    with pytest.raises(ValidationError, match="memory_limit"):
        ClusterSpec(memory_limit=value)


@pytest.mark.parametrize("value", ["127.0.0.1:8787", ":0", "0.0.0.0:8787", "localhost:0",
                                   "[::1]:8787"])  # fmt: skip
def test_dashboard_address_takes_host_and_port(value: str) -> None:
    assert ClusterSpec(dashboard_address=value).dashboard_address == value


@pytest.mark.parametrize("value", ["8787", 8787])
def test_dashboard_address_takes_a_bare_port_on_the_loopback(value: object) -> None:
    """Dask's bare port: the loopback interface, as ':PORT' (docs/deploy.md)."""
    from dparallel.cluster.handle import dashboard_address

    assert dashboard_address(ClusterSpec(dashboard_address=value)) == "127.0.0.1:8787"


@pytest.mark.parametrize(
    "value", ["nonsense", "127.0.0.1", "host:port", ":99999", "a b:1", ":8787,:8788"]
)
def test_dashboard_address_refuses_what_is_no_address(value: str) -> None:
    """A word was taken for a host name when the cluster started ('Name or service not
    known', the key not named): the spec names it, so validate refuses it too."""
    with pytest.raises(ValidationError, match=r"dashboard_address .*give HOST:PORT or :PORT"):
        ClusterSpec(dashboard_address=value)
