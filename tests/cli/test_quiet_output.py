"""Quiet means quiet: with ``-q`` nothing but errors and the summary reaches the terminal."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from dparallel.cli._options import on_connect

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize("quiet", [True, False])
def test_the_dashboard_link_is_printed_only_without_quiet(quiet, capsys):
    args = argparse.Namespace(quiet=quiet, verbose=0, log_file=None)
    handle = SimpleNamespace(dashboard_link="http://127.0.0.1:8787/status", source="remote")
    on_connect(args)(handle)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("" if quiet else "dashboard: http://127.0.0.1:8787/status\n")


_LEAK_A_SEMAPHORE = """
import multiprocessing, os
kept = multiprocessing.get_context("spawn").Semaphore()  # registered with the tracker
os._exit(0)  # never released: the tracker cleans it up, and says so, at exit
"""


def _stderr_of_a_leak(env: dict[str, str], tmp_path: Path) -> str:
    """What a process that leaks a semaphore, and its resource tracker after it, print."""
    err = tmp_path / "err.txt"
    with err.open("w") as handle:
        subprocess.run([sys.executable, "-c", _LEAK_A_SEMAPHORE], env=env, stderr=handle)
    deadline = time.monotonic() + 5  # the tracker writes once it sees the process gone
    while time.monotonic() < deadline and not err.read_text():
        time.sleep(0.1)
    return err.read_text()


def test_the_resource_trackers_leaked_semaphore_warning_is_not_shown(monkeypatch, capsys, tmp_path):
    """Processes a command starts inherit a filter for the tracker's note at exit."""
    from dparallel.cli.main import main

    monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    assert main(["schema"]) == 0
    capsys.readouterr()
    env = dict(os.environ)
    assert "multiprocessing.resource_tracker" in env.get("PYTHONWARNINGS", "")
    assert _stderr_of_a_leak(env, tmp_path) == ""
    env.pop("PYTHONWARNINGS")  # the same process without the filter: the test can fail
    assert "leaked semaphore" in _stderr_of_a_leak(env, tmp_path)
