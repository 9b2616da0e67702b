"""``dparallel export`` of an n2p2 potential directory: its ``lammps.model``.

(The export of trained models: tests/deploy/test_export_record.py, tests/deploy/test_artifacts.py;
that ``pair_style dparallel`` runs the written file as n2p2 does: tests/lammps.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ase.units import Bohr

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "n2p2"))
from n2p2_helpers import n2p2_potential

from dparallel.cli.main import main


def _cutoff(path: Path) -> float:
    lines = path.read_text().splitlines()
    return next(float(ln.split()[1]) for ln in lines if ln.startswith("cutoff"))


@pytest.mark.parametrize("units", [None, "bohr-hartree"])
def test_export_of_an_n2p2_directory_writes_its_lammps_model(
    tmp_path: Path, capsys: pytest.CaptureFixture, units: str | None
) -> None:
    """The lammps.model that `pair_coeff * * DIR` reads, in Å/eV, from the potential's units."""
    d = n2p2_potential(tmp_path / "pot")
    args = ["export", str(d)] + ([] if units is None else ["--units", units])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "lammps.model" in out and "pair_coeff * * " in out
    text = (d / "lammps.model").read_text()
    assert text.startswith("dparallel-lammps-model") and "unsupported" not in text
    assert "elements 3 Cu Ag Au" in text
    assert _cutoff(d / "lammps.model") == pytest.approx(5.2 * (Bohr if units else 1.0), 1e-12)
    assert not (d / "model.pt").exists()


def test_an_n2p2_directory_without_scaling_data_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Not 'no trained model ... run dparallel train': the n2p2 file that is missing."""
    d = n2p2_potential(tmp_path / "pot")
    (d / "scaling.data").unlink()
    assert main(["export", str(d)]) == 2
    err = capsys.readouterr().err
    assert "scaling" in err and str(d / "scaling.data") in err and "dparallel train" not in err


def test_a_float32_export_keeps_the_trained_weights_in_deployed_pt_and_lammps_model(
    tmp_path: Path,
) -> None:
    """``--float32`` is the precision the files are run in by default, not a rounding of
    the weights: deployed.pt read in float64 (``Calculator``'s default) and lammps.model
    (LAMMPS computes in double) give the trained model's numbers, bit for bit."""
    import shutil

    import numpy as np
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
    from _deploy_models import hco_acsf, structures, write_model_dir

    from dparallel.deploy import DeployedModel, load_deployed
    from dparallel.nn import load_model
    from dparallel.train.export import export_model
    from dparallel.types import StructureBatch

    write_model_dir(tmp_path / "m32", hco_acsf())
    shutil.copytree(tmp_path / "m32", tmp_path / "m64")
    export_model(tmp_path / "m64", artifacts=False)
    report = export_model(tmp_path / "m32", dtype=torch.float32, artifacts=False)
    assert report["dtype"] == "float32"
    lammps = [(tmp_path / m / "lammps.model").read_text() for m in ("m32", "m64")]
    assert lammps[0] == lammps[1]

    batch = StructureBatch.from_ase(list(structures().values()))
    trained, _ = load_model(tmp_path / "m32")  # the training-time model, float64
    want = DeployedModel(hco_acsf(), trained).predict(batch)
    got = load_deployed(tmp_path / "m32", dtype=torch.float64).predict(batch)
    for key in ("energy", "forces", "energies"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    single = load_deployed(tmp_path / "m32")  # the export's dtype by default
    assert single.dtype == torch.float32
    got = single.predict(batch)
    np.testing.assert_allclose(got["energy"], want["energy"], rtol=1e-6)
    np.testing.assert_allclose(
        got["forces"], want["forces"], atol=1e-5 * np.abs(want["forces"]).max()
    )
