"""``dparallel evaluate`` loads what predicting needs, not the training loop, the store
(zarr) or ASE's readers: importing them cost ~0.4 s of its ~3 s start
(benchmarks/bench_predict.py). ``Metrics`` came through ``dparallel.train``'s eager
``__init__`` (loop, store, zarr), and opening a file with ``--format n2p2`` imported
``ase.io`` (scipy) only to learn that n2p2 is a known format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "n2p2"))
from n2p2_helpers import alloy_structures, n2p2_potential

from dparallel.n2p2 import write_input_data

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("zarr", "dparallel.store", "dparallel.train.loop", "ase.io", "scipy.integrate")

SCRIPT = """
import json, sys
from dparallel.cli.main import main
rc = main(["evaluate", sys.argv[1], sys.argv[2], "--format", "n2p2", "--json"])
print(json.dumps([rc, [m for m in sys.argv[3:] if m in sys.modules]]))
"""


def test_evaluate_imports_no_training_store_or_ase_readers(tmp_path: Path) -> None:
    pot = n2p2_potential(tmp_path / "pot")
    data = write_input_data(tmp_path / "input.data", alloy_structures(2))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(pot), str(data), *HEAVY],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report, last = proc.stdout.strip().splitlines()[-2:]
    assert json.loads(report)["n_structures"] == 3  # two cells and the cluster
    rc, loaded = json.loads(last)
    assert rc == 0
    assert loaded == []
