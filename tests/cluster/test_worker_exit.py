"""The fast-exit worker preload: os._exit only after a normal close, and a real cluster."""

from __future__ import annotations

import types

import pytest

from dparallel import _exit
from dparallel.cluster import ClusterSpec, connect
from dparallel.cluster.worker_exit import FAST_EXIT_PRELOAD, exit_fast


class _Exited(Exception):
    pass


def _fake_exit(code: int) -> None:
    raise _Exited(code)


@pytest.mark.parametrize(("status", "exits"), [("closed", True), ("running", False)])
def test_exits_only_after_a_normal_close(monkeypatch, status, exits):
    monkeypatch.setattr(_exit.os, "_exit", _fake_exit)
    worker = types.SimpleNamespace(status=types.SimpleNamespace(name=status))
    if exits:
        with pytest.raises(_Exited, match="0"):
            exit_fast(worker)
    else:
        assert exit_fast(worker) is None


def _pid() -> int:
    import os

    return os.getpid()


@pytest.mark.integration
def test_local_cluster_with_the_preload_runs_and_closes():
    import psutil

    spec = ClusterSpec(n_workers=1, dashboard_address="127.0.0.1:0")
    with connect(spec, worker_preload=(FAST_EXIT_PRELOAD,)) as handle:
        pid = handle.client.submit(_pid, pure=False).result(timeout=120)
        nanny_logs = handle.cluster.get_logs()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not any("Traceback" in str(v) for v in nanny_logs.values())
