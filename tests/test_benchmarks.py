"""Every benchmark script starts: ``--help`` runs (its imports of the package and of the
other benchmark modules resolve); a script needing a package of the ``bench`` extra that
is not installed says which. Where a benchmark's own code path needs checking, a tiny run
of it (bench_n2p2's bytecode, bench_object_store on Azurite)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from s3process import azurite

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(
    p for p in (ROOT / "benchmarks").glob("*.py") if '__name__ == "__main__"' in p.read_text()
)


def _bench_only() -> set[str]:
    """Import names of the packages the ``bench`` extra alone brings."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]

    def names(specs: list[str]) -> set[str]:
        return {re.split(r"[\[<>=;! ]", s, maxsplit=1)[0].replace("-", "_") for s in specs}

    return names(extras["bench"]) - names(extras["test"])


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_script_starts(script: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", done.stderr)
    if missing and missing.group(1).split(".")[0] in _bench_only():
        pytest.skip(f"{script.name} needs {missing.group(1)} (pip install -e '.[bench]')")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_n2p2_benchmark_times_the_package_with_its_bytecode(tmp_path: Path) -> None:
    """bench_n2p2 writes the bytecode of the dparallel package the runs import (a fake one
    here), even where the environment says not to: without it each run's processes compiled
    the modules again (not what an install does)."""
    package = tmp_path / "dparallel"
    package.mkdir()
    for name in ("__init__.py", "mod.py"):
        (package / name).write_text("X = 1\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "benchmarks")]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import bench_n2p2; print(bench_n2p2.compile_bytecode())"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip()) == package
    compiled = {p.name.split(".")[0] for p in (package / "__pycache__").glob("*.pyc")}
    assert compiled == {"__init__", "mod"}


@pytest.mark.slow
@pytest.mark.integration
def test_object_store_benchmark_measures_a_store_on_azurite(water: Path) -> None:
    """bench_object_store's Azurite server (a tiny run): an ``az://`` input and store against
    the local ones, with the same test metrics after training (the local store's training
    the reference), the CPU each side cost and the server's CPU per request and per MB."""
    if azurite() is None:
        pytest.skip("Azurite is not installed (npm install -g azurite@3.35.0, as .ci/run)")
    pytest.importorskip("obstore")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "N2P2_WATER": str(water)}
    argv = ["--server", "azurite", "--copies", "1", "--epochs", "2", "--workers", "1"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_object_store.py"), *argv],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "Azure (azurite) / local: featurize throughput" in out, out
    assert "test metrics identical: True" in out, out
    number = r" +([\d.]+)"
    cpu = re.search(rf"Azure \(azurite\) +workers{number} +driver{number} +server{number}", out)
    assert cpu and all(float(s) > 0 for s in cpu.groups()), out
    cost = re.search(r"server CPU: ([\d.]+) ms per request .*, ([\d.]+) ms per MB", out)
    assert cost and all(float(s) > 0 for s in cost.groups()), out
