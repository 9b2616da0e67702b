"""`dparallel featurize` on a local cluster as a user sees it: link, bar, summary, no chatter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
import yaml

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

DESCRIPTORS = {
    "acsf": {
        "elements": ["Cu"],
        "r_cut": 4.5,
        "cutoff": "cos",
        "radial": [[0.5, 0.0]],
        "narrow": [[0.02, 1.0, 1.0, 0.0]],
        "wide": [],
    }
}


def _featurize(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    from dparallel.datasets import write_emt_cu

    source = tmp_path / "cu.extxyz"
    if not source.exists():
        write_emt_cu(source, n_structures=12, seed=5)
        (tmp_path / "d.yaml").write_text(yaml.safe_dump(DESCRIPTORS))
    store = tmp_path / f"s{len(flags)}.zarr"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    return subprocess.run(
        [sys.executable, "-m", "dparallel", *flags, "featurize", str(source), "-o", str(store),
         "--descriptors", str(tmp_path / "d.yaml"), "--local", "1", "--partition-atoms", "40"],
        env=env, capture_output=True, text=True, timeout=240, check=True,
    )  # fmt: skip


def test_quiet_by_default_dask_logs_with_verbose(tmp_path: Path) -> None:
    quiet = _featurize(tmp_path)
    assert "dashboard: http://127.0.0.1:" in quiet.stderr
    assert "featurize " not in quiet.stderr  # no progress bar into a pipe (a terminal only)
    assert "12 structures" in quiet.stdout and "done in" in quiet.stdout
    assert "INFO distributed" not in quiet.stderr
    info = subprocess.run(
        [sys.executable, "-m", "dparallel", "info", str(tmp_path / "s0.zarr"), "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    report = json.loads(info.stdout)
    assert report["complete"] is True and report["partitions_done"] == report["partitions_total"]
    verbose = _featurize(tmp_path, "-v")
    assert "INFO distributed.scheduler" in verbose.stderr
