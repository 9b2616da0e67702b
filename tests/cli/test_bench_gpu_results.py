"""The GPU run's results file (benchmarks/gpu_results.py): one section per benchmark run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_results.py"


@pytest.fixture
def results(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_results", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("DPARALLEL_GPU_RESULTS", str(tmp_path / "gpu.json"))
    monkeypatch.setattr(module, "machine", lambda: {"host_cpus": 2})
    return module


def test_a_second_run_of_a_section_is_kept_beside_the_first(results, tmp_path):
    results.record("train_water_x25_b64", {"epoch_s": 1.0})
    results.record("train_water_x25_b64", {"epoch_s": 2.0})
    results.record("train_water_x25_b64", {"epoch_s": 3.0})
    results.record("other", {"epoch_s": 4.0})
    data = json.loads((tmp_path / "gpu.json").read_text())
    assert data["machine"] == {"host_cpus": 2}
    assert [data[k]["epoch_s"] for k in
            ("train_water_x25_b64", "train_water_x25_b64_run2", "train_water_x25_b64_run3")
            ] == [1.0, 2.0, 3.0]  # fmt: skip
    assert data["other"]["epoch_s"] == 4.0
