"""Local workers forked from the forkserver: preloaded, environment as spawned, fallback.

Each case runs in a fresh interpreter: a process has one forkserver, started with the
preload of whoever starts it first (in this test session: any earlier test's cluster).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

_ROOT = Path(__file__).resolve().parents[2]

# What a task reports from its worker: parent pid, whether the marker module was imported
# before any task ran (it is never imported by the task), and an environment variable.
_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from dparallel.cluster import ClusterSpec, connect
    from dparallel.cluster.forkserver import server_pid, start_forkserver

    def report():
        return [os.getppid(), "_warm_marker" in sys.modules, os.environ.get("DP_TEST_LATE")]

    if __name__ == "__main__":
        early = start_forkserver(["_warm_marker"]) if sys.argv[1] == "early" else None
        os.environ["DP_TEST_LATE"] = "set after the server started"
        spec = ClusterSpec(n_workers=2, dashboard_address="127.0.0.1:0")
        with connect(spec, forkserver_preload=["_warm_marker"]) as handle:
            workers = list(handle.client.scheduler_info(n_workers=-1)["workers"])
            got = [handle.client.submit(report, pure=False, workers=[w]).result(timeout=120)
                   for w in workers]
        print(json.dumps({"early": early, "server": server_pid(), "driver": os.getpid(),
                          "workers": got}))
    """
)


def _run(tmp_path, mode: str, **env: str) -> dict:
    (tmp_path / "_warm_marker.py").write_text("MARKED = True\n")
    (tmp_path / "script.py").write_text(_SCRIPT)
    out = subprocess.run(
        [sys.executable, "script.py", mode],
        cwd=tmp_path,
        # this checkout first (not the installed package), then the marker module
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), str(tmp_path)]), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["early", "at-connect"])
def test_workers_fork_from_the_preloaded_server(tmp_path, mode):
    got = _run(tmp_path, mode)
    assert got["early"] is (True if mode == "early" else None)
    assert got["server"] not in (None, got["driver"])
    assert len(got["workers"]) == 2
    for parent, marked, late in got["workers"]:
        assert parent == got["server"]  # forked by the server, not spawned by the driver
        assert marked  # imported by the server before the fork
        assert late == "set after the server started"  # the driver's environment of now


def test_switched_off_workers_are_spawned_as_dask_does(tmp_path):
    got = _run(tmp_path, "at-connect", DPARALLEL_WARM_WORKERS="0")
    assert got["server"] is None
    for parent, marked, late in got["workers"]:
        assert parent == got["driver"]
        assert not marked
        assert late == "set after the server started"


def test_a_server_still_preloading_stops_at_once(tmp_path):
    """``stop_forkserver`` ends a server in the middle of its preload (here a module that
    sleeps a minute) within seconds, and a new one can start after it."""
    (tmp_path / "_slow_marker.py").write_text("import time\ntime.sleep(60)\n")
    script = textwrap.dedent(
        """
        import json, os, time
        from dparallel.cluster.forkserver import server_pid, start_forkserver, stop_forkserver

        if __name__ == "__main__":
            started = start_forkserver(["_slow_marker"])
            pid = server_pid()
            t0 = time.monotonic()
            stop_forkserver()
            took = time.monotonic() - t0
            try:
                os.kill(pid, 0)
                alive = True
            except ProcessLookupError:
                alive = False
            print(json.dumps({"started": started, "pid": pid, "after": server_pid(),
                              "alive": alive, "took": took,
                              "again": start_forkserver(), "new": server_pid()}))
        """
    )
    (tmp_path / "stop.py").write_text(script)
    out = subprocess.run(
        [sys.executable, "stop.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), str(tmp_path)])},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["started"] is True and got["pid"] is not None
    assert got["after"] is None and not got["alive"]
    assert got["took"] < 10  # not the preload's minute
    assert got["again"] is True and got["new"] not in (None, got["pid"])


_INTERRUPTED = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from pathlib import Path
    from dparallel.cluster import ClusterSpec, connect
    from dparallel.cluster.forkserver import server_pid, start_forkserver
    from dparallel.cluster.worker_exit import FAST_EXIT_PRELOAD

    def pid():
        return os.getpid()

    def wait_for(what, seconds=120):
        deadline = time.monotonic() + seconds
        while not what():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)

    if __name__ == "__main__":
        server = None
        if start_forkserver(["_preloading_marker"]):  # Ctrl-C while the server preloads
            server = server_pid()
            wait_for(Path("preloading").exists)
            os.kill(server, signal.SIGINT)
        spec = ClusterSpec(n_workers=1, dashboard_address="127.0.0.1:0")
        with connect(spec, worker_preload=(FAST_EXIT_PRELOAD,)) as handle:
            before = handle.client.run(pid)
            for worker in before.values():  # Ctrl-C as a terminal sends it to every process
                os.kill(worker, signal.SIGINT)
            time.sleep(3)  # a worker killed by it is restarted by its nanny with another pid
            after = handle.client.run(pid)
        print(json.dumps({"server": server, "server_now": server_pid(),
                          "before": sorted(before.values()), "after": sorted(after.values())}))
    """
)


@pytest.mark.parametrize("warm", ["1", "0"])
def test_local_workers_and_their_server_ignore_ctrl_c(tmp_path, warm):
    """A terminal's Ctrl-C reaches the command's local cluster too: its forkserver (here
    while it still preloads) and its workers, forked or spawned, ignore it (the command
    closes them) rather than each printing a KeyboardInterrupt traceback and dying."""
    (tmp_path / "_preloading_marker.py").write_text(
        "import pathlib, time\npathlib.Path('preloading').touch()\ntime.sleep(3)\n"
    )
    (tmp_path / "interrupted.py").write_text(_INTERRUPTED)
    out = subprocess.run(
        [sys.executable, "interrupted.py"],
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(_ROOT), str(tmp_path)]),
            "DPARALLEL_WARM_WORKERS": warm,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "KeyboardInterrupt" not in out.stderr, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(got["before"]) == 1 and got["after"] == got["before"]
    if warm == "1":
        assert got["server"] is not None and got["server_now"] == got["server"]
