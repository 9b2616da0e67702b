"""`dparallel run` as a user runs it: the commands it prints next run."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
import yaml

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(400)]


def test_a_workflow_without_training_suggests_a_train_command_that_trains(
    tmp_path: Path,
) -> None:
    # it said `dparallel train STORE -o model/ --set epochs=100`, which train refuses for a
    # store of neighbor sums without dG/dr (training's defaults: ACSF, forces)
    workflow = {
        "name": "sums",
        "dataset": {"path": "cu.extxyz", "generate": {"kind": "emt_cu", "n_structures": 8}},
        "descriptors": {"neighbor_sum": {"elements": ["Cu"], "r_cut": 4.5, "n_sensitivities": 3}},
        "store": {"path": "s.zarr"},
        "cluster": {"n_workers": 1, "dashboard_address": "127.0.0.1:0"},
    }
    (tmp_path / "wf.yaml").write_text(yaml.safe_dump(workflow))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    ran = subprocess.run(
        [sys.executable, "-m", "dparallel", "run", "wf.yaml", "-q"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    suggested = next(l.split() for l in ran.stdout.splitlines() if "dparallel train " in l)
    small = ["--set", "epochs=1", "--set", "hidden=[4]", "-q"]
    trained = subprocess.run(
        [sys.executable, "-m", "dparallel", *suggested[1:], *small],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert trained.returncode == 0, (ran.stdout, trained.stderr)
