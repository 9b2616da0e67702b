"""The reliability suite a user runs (benchmarks/bench_faults.py): its probes hold."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_faults.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_faults", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_faults"] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("bench_faults", None)


def test_every_probe_holds(bench, capsys):
    assert bench.main_cli([]) == 0
    out = capsys.readouterr().out
    assert f"{len(bench.PROBES)} of {len(bench.PROBES)} probes held" in out
    assert "!!" not in out


def test_a_probe_that_does_not_hold_is_flagged(bench, capsys, monkeypatch):
    broken = bench.Probe("cli", "broken", "holds", lambda tmp: (False, "it did not"))
    monkeypatch.setattr(bench, "PROBES", [broken])
    assert bench.main_cli([]) == 1
    out = capsys.readouterr().out
    assert "!! cli" in out and "it did not" in out and "0 of 1 probes held" in out
