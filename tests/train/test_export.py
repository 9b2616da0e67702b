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


def test_a_float32_export_reports_its_distance_from_the_float64_model(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """export.json and the summary say how far each float32 artifact is from the trained
    float64 model on the probe structures (not only from the float32 model it was made
    of): here recomputed with the float64 Calculator and the artifacts loaded by torch."""
    import json

    import numpy as np
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
    from _deploy_models import hco_acsf, write_model_dir

    from dparallel.ase import Calculator
    from dparallel.deploy.probes import inputs_from_atoms, probe_atoms

    model_dir = write_model_dir(tmp_path / "m", hco_acsf())
    assert main(["export", str(model_dir), "--float32"]) == 0
    printed = capsys.readouterr().out
    report = json.loads((model_dir / "export.json").read_text())
    calc = Calculator(model_dir, dtype=torch.float64)  # deployed.pt keeps the trained weights
    loaded = {
        "torch_export": torch.export.load(str(model_dir / "potential.pt2")).module(),
        "torchscript": torch.jit.load(str(model_dir / "potential.ts")),
    }
    for route, run in loaded.items():
        worst = {"energy": 0.0, "forces": 0.0}
        for atoms in probe_atoms(report["elements"]):
            atoms.calc = calc
            want = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces()}
            got = run(*inputs_from_atoms(atoms, report["cutoff"], torch.float32))
            for k, (key, w) in enumerate(want.items()):
                d = np.abs(got[k].detach().double().numpy() - w).max()
                worst[key] = max(worst[key], float(d))
        shown = report["routes"][route]["max_abs_diff_float64"]
        assert worst["energy"] > 1e-9 and worst["forces"] > 1e-9  # float32 rounding: not 0
        for key in worst:
            assert shown[key] == pytest.approx(worst[key], rel=1e-3, abs=1e-12), (route, key)
    line = next(ln for ln in printed.splitlines() if "vs the float64 model.pt" in ln)
    e64 = report["routes"]["torch_export"]["max_abs_diff_float64"]["energy"]
    assert f"max |dE| {e64:.1e} eV" in line
