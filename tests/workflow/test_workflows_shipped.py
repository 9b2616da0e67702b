"""Every ``workflows/*.yaml`` runs as shipped (small settings via ``--set``), from the repo root.

``quickstart.yaml`` runs end to end in ``test_run.py``; here the others. Paths in the files
are relative to the working directory (the repository root, as docs/workflows.md runs
them); only the outputs are redirected into ``tmp_path``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted(p.name for p in (ROOT / "workflows").glob("*.yaml"))
SMALL = [
    "--set", "training.epochs=1",
    "--set", "training.hidden=[4]",
    "--set", "cluster.n_workers=1",
    "--set", "cluster.dashboard_address=127.0.0.1:0",
    "--set", "output.export=false",
]  # fmt: skip


def _water(path: Path, n: int = 8) -> Path:
    """H2O molecules labelled with ASE's EMT (elements H, O as large-cluster.yaml needs)."""
    from ase.build import molecule
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.io import write

    rng = np.random.default_rng(0)
    frames = []
    for _ in range(n):
        a = molecule("H2O")
        a.positions += rng.normal(scale=0.05, size=a.positions.shape)
        a.calc = EMT()
        a.calc = SinglePointCalculator(a, energy=a.get_potential_energy(), forces=a.get_forces())
        frames.append(a)
    write(path, frames)
    return path


def _extra(name: str, tmp: Path) -> list[str]:
    """What only this file needs: a tiny dataset, or a local cluster instead of an address."""
    if name == "molecules.yaml":
        return ["--set", "dataset.generate.n_structures=20", "--set", f"dataset.path={tmp}/m.xyz"]
    if name == "large-cluster.yaml":  # its data and scheduler are the user's: stand-ins
        return [
            "--set", f"dataset.path={_water(tmp / 'water.extxyz')}",
            "--set", "cluster.kind=local",
            "--set", "partitioning.atoms=12",
        ]  # fmt: skip
    return []


@pytest.mark.parametrize("name", [w for w in WORKFLOWS if w != "quickstart.yaml"])
def test_shipped_workflow_runs(name: str, tmp_path: Path) -> None:
    outputs = [
        "--set", f"store.path={tmp_path}/store.zarr",
        "--set", f"output.model_dir={tmp_path}/model",
    ]  # fmt: skip
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "dparallel", "run", f"workflows/{name}", *SMALL,
         *_extra(name, tmp_path), *outputs],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "featurize ran, train ran" in proc.stdout
    assert (tmp_path / "model" / "model.pt").is_file()
    assert "done in" in proc.stdout and "dparallel evaluate" in proc.stdout
