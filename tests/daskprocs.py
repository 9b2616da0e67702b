"""Test helpers: run ``dask scheduler`` / ``dask worker`` as real processes, bounded in time.

Importable from any test module (``tests/`` is on ``sys.path`` through the rootdir conftest).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def dask_executable() -> str:
    """The ``dask`` console script of the running interpreter's environment."""
    candidate = Path(sys.executable).with_name("dask")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("dask")
    if found is None:
        pytest.skip("no `dask` executable found")
    return found


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for child processes: the repository on PYTHONPATH, no inherited scheduler."""
    env = dict(os.environ)
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.update(extra or {})
    return env


def start(
    argv: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen:
    """Start ``argv`` in its own process group (in ``cwd``), output to ``log``."""
    fh = open(log, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        argv,
        stdout=fh,
        stderr=subprocess.STDOUT,
        env=env or child_env(),
        cwd=cwd,
        start_new_session=True,
    )
    proc._log_handle = fh  # type: ignore[attr-defined]
    return proc


def wait_scheduler_file(path: Path, proc: subprocess.Popen, log: Path, timeout: float = 60) -> dict:
    """Wait until the scheduler wrote its file; return its contents."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"scheduler exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        if path.exists():
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:
                pass
        time.sleep(0.1)
    raise TimeoutError(f"no scheduler file after {timeout} s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM the process group, SIGKILL after ``timeout`` s."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    handle = getattr(proc, "_log_handle", None)
    if handle is not None:
        handle.close()


def http_get(url: str, timeout: float = 20) -> tuple[int, str]:
    """GET ``url``; returns (status, body)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode("utf-8", "replace")


def wait_workers(client, n: int, timeout: float = 60) -> None:
    """Wait until ``n`` workers are connected (bounded)."""
    client.wait_for_workers(n, timeout=timeout)


def start_scheduler(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """``dask scheduler`` on 127.0.0.1 (random ports, ``extra`` options); (process, address)."""
    sfile = tmp_path / "scheduler.json"
    log = tmp_path / "scheduler.log"
    argv = [dask_executable(), "scheduler", "--host", "127.0.0.1", "--port", "0"]
    argv += ["--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(sfile), *extra]
    proc = start(argv, log)
    try:
        return proc, wait_scheduler_file(sfile, proc, log)["address"]
    except BaseException:
        stop(proc)
        raise


def start_worker(
    address: str, log: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """``dask worker ADDRESS`` on 127.0.0.1 with 1 thread (``extra`` options appended)."""
    argv = [dask_executable(), "worker", address, "--nthreads", "1", "--host", "127.0.0.1"]
    argv += ["--dashboard-address", "127.0.0.1:0", *extra]
    return start(argv, log, env=env or child_env())
