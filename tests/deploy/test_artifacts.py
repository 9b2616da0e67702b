"""`dparallel export` artifacts, loaded by a process that cannot import dparallel, match
``dparallel.ase.Calculator`` (analytic descriptor derivatives) to 1e-10 in float64."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _deploy_models import hco_acsf, hco_neighbor_sum, structures, write_model_dir
from ase.neighborlist import neighbor_list as ase_neighbor_list
from ase.stress import full_3x3_to_voigt_6_stress

from dparallel.cli.main import main

RUNNER = Path(__file__).with_name("plain_torch_runner.py")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "training.md"
SKIN = 0.7  # the inputs' neighbour lists reach beyond the cutoff, as a list with a skin does


@pytest.fixture(scope="module", params=["acsf", "neighbor_sum"])
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """A model directory exported through the CLI, its report and the printed text."""
    descriptor = hco_acsf() if request.param == "acsf" else hco_neighbor_sum()
    model_dir = write_model_dir(tmp_path_factory.mktemp(request.param), descriptor)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["export", str(model_dir)])
    report = json.loads((model_dir / "export.json").read_text())
    return request.param, model_dir, report, out.getvalue(), rc


def _inputs_as_ase_would(atoms, cutoff: float, seed: int) -> dict[str, np.ndarray]:  # noqa: ANN001
    """The seven inputs with ASE's own neighbour list (cutoff + skin), pairs shuffled."""
    i, j, shifts = ase_neighbor_list("ijS", atoms, cutoff + SKIN)
    order = np.random.default_rng(seed).permutation(len(i))
    return {
        "positions": atoms.positions.astype(np.float64),
        "numbers": atoms.numbers.astype(np.int64),
        "cell": atoms.cell.array.astype(np.float64),
        "pbc": atoms.pbc.astype(bool),
        "pair_first": i[order].astype(np.int64),
        "pair_second": j[order].astype(np.int64),
        "shifts": shifts[order].astype(np.float64),
    }


def _run_plain_torch(kind: str, artifact: Path, cutoff: float, tmp_path: Path) -> dict:
    """Outputs of ``artifact`` on :func:`structures`, computed in a dparallel-free process."""
    arrays = {}
    for k, (name, atoms) in enumerate(structures().items()):
        for key, value in _inputs_as_ase_would(atoms, cutoff, k).items():
            arrays[f"{name}/{key}"] = value
    np.savez(tmp_path / "in.npz", **arrays)
    done = subprocess.run(
        [sys.executable, str(RUNNER), kind, str(artifact), "in.npz", "out.npz"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(np.load(tmp_path / "out.npz"))


def _assert_matches_calculator(out: dict, model_dir: Path) -> None:
    from dparallel.ase import Calculator

    calc = Calculator(model_dir)
    for name, atoms in structures().items():
        atoms.calc = calc
        energy, forces = atoms.get_potential_energy(), atoms.get_forces()
        assert abs(float(out[f"{name}/energy"]) - energy) < 1e-10, name
        np.testing.assert_allclose(out[f"{name}/forces"], forces, rtol=0, atol=1e-10)
        np.testing.assert_allclose(
            out[f"{name}/energies"], atoms.get_potential_energies(), rtol=0, atol=1e-10
        )
        if atoms.pbc.all():
            stress = full_3x3_to_voigt_6_stress(out[f"{name}/stress"])
            np.testing.assert_allclose(stress, atoms.get_stress(), rtol=0, atol=1e-10)
            assert np.abs(stress).max() > 1e-4  # a real comparison, not of zeros
        else:
            assert np.isnan(out[f"{name}/stress"]).all()
        if len(atoms) > 1:
            assert np.abs(forces).max() > 1e-3


def test_export_reports_every_route_with_the_models_elements(exported) -> None:  # noqa: ANN001
    kind, _model_dir, report, printed, rc = exported
    assert rc == 0
    assert report["descriptor"] == kind and report["elements"] == ["H", "C", "O"]
    assert {p.split()[0] for p in report["probes"]} == {"C3H3O2", "C2H2O"}  # own elements
    assert report["routes"]["torch_export"]["status"] == "ok"
    assert report["routes"]["torchscript"]["status"] == "ok"
    assert report["routes"]["aot_inductor"] == {
        "status": "skipped",
        "reason": "not requested (--aoti)",
    }
    for route in ("torch_export", "torchscript"):
        assert max(report["routes"][route]["max_abs_diff"].values()) < 1e-10
        assert "max_abs_diff_float64" not in report["routes"][route]  # it is the float64 one
    assert {"deployed.pt", "potential.pt2", "potential.ts"} <= set(report["files"])
    assert "torch_export: ok -> potential.pt2 (checked on C3H3O2 periodic fcc" in printed
    assert "vs deployed.pt)" in printed
    assert "torchscript: ok -> potential.ts" in printed


@pytest.mark.slow
@pytest.mark.parametrize("route", ["export", "torchscript"])
def test_artifact_without_dparallel_matches_calculator(exported, route, tmp_path) -> None:  # noqa: ANN001
    _, model_dir, report, _, _ = exported
    name = "potential.pt2" if route == "export" else "potential.ts"
    out = _run_plain_torch(route, model_dir / name, report["cutoff"], tmp_path)
    _assert_matches_calculator(out, model_dir)


@pytest.mark.slow
def test_aot_inductor_package_without_dparallel_matches_calculator(tmp_path) -> None:  # noqa: ANN001
    """--aoti compiles C++ (about a minute); the neighbor-sum model keeps the graph small."""
    model_dir = write_model_dir(tmp_path / "m", hco_neighbor_sum())
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["export", str(model_dir), "--aoti"]) == 0
    report = json.loads((model_dir / "export.json").read_text())
    assert report["routes"]["aot_inductor"]["status"] == "ok", report["routes"]["aot_inductor"]
    out = _run_plain_torch("aoti", model_dir / "potential_aoti.pt2", report["cutoff"], tmp_path)
    _assert_matches_calculator(out, model_dir)


def test_artifact_refuses_an_element_outside_the_model(exported) -> None:  # noqa: ANN001
    _, model_dir, _, _, _ = exported
    from dparallel.deploy.probes import inputs_from_atoms

    atoms = structures()["molecule"]
    atoms.numbers[0] = 29  # Cu
    args = inputs_from_atoms(atoms, 3.5, torch.float64)
    potential = torch.export.load(model_dir / "potential.pt2").module()
    with pytest.raises(RuntimeError, match="not among the model's"):
        potential(*args)


@pytest.mark.parametrize("message", ["", "  \n", "failed at:", "failed at:\nthe rest"])
def test_a_reason_that_names_only_a_type_says_where_it_was_raised(message: str) -> None:
    from dparallel.deploy.artifacts import reason

    def bare() -> None:
        raise AssertionError(message)

    try:
        bare()
    except AssertionError as exc:
        got = reason(exc)
    first = message.strip().splitlines()[0] if message.strip() else ""
    assert got.startswith(f"AssertionError: {first}".rstrip())
    assert got.endswith("in bare)") and "(raised at tests/deploy/test_artifacts.py:" in got
    assert reason(ValueError(" cannot trace this \nsecond")) == "ValueError: cannot trace this"


def test_a_failure_is_reported_with_its_reason(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """A route that cannot be built leaves no file, says why in export.json; CLI exits 1."""
    import dparallel.deploy.artifacts as artifacts

    def broken(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise ValueError("cannot trace this\nsecond line")

    monkeypatch.setattr(artifacts, "flatten", broken)
    model_dir = write_model_dir(tmp_path / "m", hco_neighbor_sum())
    (model_dir / "potential.ts").write_text("stale file of an older model")
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["export", str(model_dir), "--no-artifacts"]) == 0
        assert "torch_export: skipped: not requested" in printed.getvalue()
        assert main(["export", str(model_dir)]) == 1
    report = json.loads((model_dir / "export.json").read_text())
    reason = "make_fx: ValueError: cannot trace this"
    assert report["routes"]["torch_export"] == {"status": "failed", "reason": reason}
    assert report["routes"]["torchscript"] == {"status": "failed", "reason": reason}
    assert not (model_dir / "potential.ts").exists() and not (model_dir / "potential.pt2").exists()
    assert report["files"] == ["deployed.pt", "lammps.model", "atomic_energy_H.pt2",
                               "atomic_energy_C.pt2",
                               "atomic_energy_O.pt2"]  # fmt: skip
    assert f"torchscript: failed: {reason}" in printed.getvalue()


def test_docs_example_runs_with_plain_torch(exported, tmp_path) -> None:  # noqa: ANN001
    """The "load with plain torch" example of docs/training.md, verbatim, without dparallel."""
    from ase.build import molecule

    from dparallel.ase import Calculator

    _, model_dir, _, _, _ = exported
    text = DOCS.read_text()
    start = text.index("```python", text.index("Loading it needs nothing"))
    example = text[start + len("```python") : text.index("```", start + 3)]
    refuse = RUNNER.read_text().split("sys.meta_path.insert(0, _RefuseDparallel())")[0]
    script = refuse + "sys.meta_path.insert(0, _RefuseDparallel())\n" + example
    script += "assert 'dparallel' not in sys.modules\nprint(repr(float(energy)))\n"
    (tmp_path / "model").symlink_to(model_dir)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    atoms = molecule("CH3CH2OH")
    atoms.calc = Calculator(model_dir)
    assert abs(float(done.stdout.split()[-1]) - atoms.get_potential_energy()) < 1e-10


def test_an_export_inside_inference_mode_is_the_export_outside(tmp_path) -> None:  # noqa: ANN001
    """A notebook cell under ``torch.inference_mode()`` calling export_model failed with
    torch's "element 0 of tensors does not require grad" (or "Inference tensors do not
    track version counter") in the plain-torch routes; the export turns it off for
    itself, and the caller's mode stays."""
    from dparallel.deploy import load_deployed
    from dparallel.train.export import export_model

    outside, inside = (write_model_dir(tmp_path / n, hco_neighbor_sum()) for n in "ab")
    expected_report = export_model(outside)
    with torch.inference_mode():
        report = export_model(inside)
        assert torch.is_inference_mode_enabled()
    assert {k: r["status"] for k, r in report["routes"].items()} == {
        k: r["status"] for k, r in expected_report["routes"].items()
    }
    frames = list(structures().values())
    found, expected = (load_deployed(d).predict(frames, stress=True) for d in (inside, outside))
    for key in expected:
        np.testing.assert_array_equal(found[key], expected[key])
