"""dparallel potentials written for n2p2: nnp-dataset gives dparallel's energies and forces."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from ase.units import Bohr, Hartree
from n2p2_helpers import alloy_structures, assert_same, nnp_dataset

from dparallel.deploy import DeployedModel
from dparallel.descriptors import ACSF
from dparallel.errors import ConfigError
from dparallel.n2p2 import (
    export_model_dir,
    load_potential,
    n2p2_problems,
    write_input_data,
    write_potential,
)
from dparallel.train import HDNNP
from dparallel.types import StructureBatch


def _potential(
    activations: list[str] | dict[str, list[str]],
    mode: str | None = "center_sigma",
    smin: float = 0.0,
    smax: float = 1.0,
    hidden: list[int] | dict[str, list[int]] = (6, 4),
    normalize_nodes: bool = False,
    seed: int = 0,
) -> tuple[ACSF, HDNNP, list]:
    """A dparallel potential on Cu/Ag/Au with a constant feature (η = 1e4 radial)."""
    structures = alloy_structures(4, seed=seed)
    acsf = ACSF.uniform(
        ["Au", "Cu", "Ag"],  # neither n2p2's element order nor its function order
        r_cut=5.0,
        cutoff="poly2",
        alpha=0.1,
        radial=[(0.8, 2.6), (0.05, 0.0), (1e4, 0.0)],
        narrow=[(0.02, 1.0, -1.0, 0.0), (0.01, 0.5, 1.0, 0.3)],  # ζ < 1, as n2p2 allows
        wide=[(0.03, 2.0, 1.0, 0.0)],
    )
    feats = acsf.compute(structures)
    model = HDNNP(
        acsf.elements,
        {e: acsf.n_features(e) for e in acsf.elements},
        hidden=hidden,
        activations=activations,
        normalize_nodes=normalize_nodes,
    ).double()
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
    stats = {}
    for e in acsf.elements:
        v = feats[e].values.numpy()
        stats[e] = {"min": v.min(0), "max": v.max(0), "mean": v.mean(0), "sigma": v.std(0, ddof=1)}
    if mode is None:  # a model from before scaling was kept as data: buffers only
        for e in acsf.elements:
            model.set_scaling(e, stats[e]["mean"], 1.0 / np.maximum(stats[e]["sigma"], 1e-3))
    else:
        model.set_scaling_from({"mode": mode, "smin": smin, "smax": smax, "statistics": stats})
    model.energy_scale.fill_(0.37)
    model.ref_energy.copy_(torch.tensor([-3.1, 0.4, 2.2]))
    return acsf, model.eval(), structures


EXPORTS = {
    "center_sigma-tanh": dict(activations=["tanh", "tanh", "identity"]),
    "minmax-logistic-softplus": dict(
        activations=["logistic", "softplus_n2p2", "identity"], mode="minmax"
    ),
    "scale-relu-gaussian-normalize_nodes": dict(
        activations=["relu", "gaussian", "cos"], mode="scale", smin=-1.0, smax=2.0,
        normalize_nodes=True,
    ),
    "scalecenter-per-element": dict(
        activations={
            "Au": ["revlogistic", "tanh", "identity"],
            "Cu": ["exp", "harmonic", "identity"],  # n2p2: one element may differ
            "Ag": ["revlogistic", "tanh", "identity"],
        },
        hidden={"Au": [6, 4], "Cu": [3, 4], "Ag": [5, 4]},
        mode="scalecenter",
        smin=0.2,
        smax=0.9,
    ),
    "none": dict(activations=["tanh", "tanh", "identity"], mode="none"),
    "buffers-only": dict(activations=["tanh", "tanh", "identity"], mode=None),
}  # fmt: skip


def _predict(acsf: ACSF, model: HDNNP, structures: list) -> dict[str, np.ndarray]:
    return DeployedModel(acsf, model).predict(StructureBatch.from_ase(structures))


@pytest.mark.integration
@pytest.mark.parametrize("units", ["ase", "bohr-hartree"])
@pytest.mark.parametrize("case", sorted(EXPORTS))
def test_export_equals_nnp_dataset(n2p2_bin: Path, tmp_path: Path, case: str, units: str) -> None:
    acsf, model, structures = _potential(**EXPORTS[case])
    assert not n2p2_problems(acsf, model)
    report = write_potential(acsf, model, tmp_path, units=units)
    assert sorted(report["files"]) == sorted(
        ["input.nn", "scaling.data", "weights.029.data", "weights.047.data", "weights.079.data"]
    )
    write_input_data(tmp_path / "input.data", structures, units=units)
    ref_e, ref_f = nnp_dataset(tmp_path)
    ours = _predict(acsf, model, structures)
    length, energy = (Bohr, Hartree) if units == "bohr-hartree" else (1.0, 1.0)
    batch = StructureBatch.from_ase(structures)
    ref_per_atom = {29: 0.4, 47: 2.2, 79: -3.1}  # Cu, Ag, Au
    offsets = np.bincount(
        batch.structure_index, [ref_per_atom[int(z)] for z in batch.numbers], len(structures)
    )
    assert_same(
        ours["energy"] / energy,
        ours["forces"] * length / energy,
        ref_e,
        ref_f,
        offsets / energy,
    )


def test_export_import_round_trip(tmp_path: Path) -> None:
    """write_potential → load_potential gives back the same potential (no n2p2 needed)."""
    for case in ("scalecenter-per-element", "buffers-only"):
        acsf, model, structures = _potential(**EXPORTS[case])
        write_potential(acsf, model, tmp_path / case, units="bohr-hartree")
        back = load_potential(tmp_path / case, units="bohr-hartree")
        assert back[0].order == "n2p2" and back[0].elements == ["Cu", "Ag", "Au"]
        a, b = _predict(acsf, model, structures), _predict(*back, structures)
        np.testing.assert_allclose(b["energy"], a["energy"], rtol=1e-12)
        np.testing.assert_allclose(b["forces"], a["forces"], rtol=0, atol=1e-12)


def test_a_new_export_removes_the_lammps_model_of_the_files_it_replaces(tmp_path: Path) -> None:
    """`dparallel export DIR` made DIR/lammps.model from the earlier files: never left stale."""
    from dparallel.cli.main import main

    acsf, model, _ = _potential(**EXPORTS["none"])
    write_potential(acsf, model, tmp_path / "pot")
    assert main(["export", str(tmp_path / "pot")]) == 0
    assert (tmp_path / "pot" / "lammps.model").is_file()
    acsf, model, _ = _potential(**EXPORTS["none"], seed=1)
    write_potential(acsf, model, tmp_path / "pot")
    assert not (tmp_path / "pot" / "lammps.model").exists()


@pytest.mark.parametrize(
    "change,reason",
    [
        (dict(activations=["silu", "tanh", "identity"]), "activation 'silu' of element"),
        (dict(activations=["softplus", "tanh", "identity"]), "train with 'softplus_n2p2'"),
        (dict(hidden={"Au": [6, 4], "Cu": [6, 3], "Ag": [6, 4]}), "same last hidden layer"),
        (dict(hidden={"Au": [6, 4], "Cu": [4], "Ag": [6, 4]}), "cannot mix network depths"),
        (dict(hidden=[]), "need at least one hidden layer"),
        (
            dict(
                activations={
                    "Au": ["tanh", "tanh", "identity"],
                    "Cu": ["exp", "tanh", "identity"],
                    "Ag": ["cos", "tanh", "identity"],
                }
            ),
            "at most one element may differ in activations",
        ),
    ],
)
def test_what_n2p2_cannot_express_is_refused(tmp_path: Path, change: dict, reason: str) -> None:
    args = {"activations": None, **change}
    if args["activations"] is None:
        hidden = args.get("hidden", [6, 4])
        depth = len(hidden["Cu"] if isinstance(hidden, dict) else hidden)
        if isinstance(hidden, dict):
            args["activations"] = {e: ["tanh"] * len(h) + ["identity"] for e, h in hidden.items()}
        else:
            args["activations"] = ["tanh"] * depth + ["identity"]
    acsf, model, _ = _potential(**args)
    with pytest.raises(ConfigError, match=reason):
        write_potential(acsf, model, tmp_path)
    assert not (tmp_path / "input.nn").exists()


@pytest.mark.integration
def test_n2p2s_own_tools_run_on_the_exported_files(n2p2_bin: Path, tmp_path: Path) -> None:
    """nnp-scaling (and nnp-train) stop on an input.nn without random_seed ("Keyword
    random_seed not found"): the export writes one, and nnp-scaling on the exported files
    finds the training statistics the export wrote."""
    from dparallel.n2p2 import read_scaling_data
    from dparallel.n2p2.binaries import run_tool

    acsf, model, structures = _potential(["tanh", "tanh", "identity"], mode="minmax")
    write_potential(acsf, model, tmp_path / "pot")
    write_input_data(tmp_path / "pot" / "input.data", structures)
    n_sf = {e: acsf.n_features(e) for e in ("Cu", "Ag", "Au")}  # n2p2's order
    ours = read_scaling_data(tmp_path / "pot" / "scaling.data", n_sf)
    (tmp_path / "pot" / "scaling.data").unlink()
    run_tool("nnp-scaling", tmp_path / "pot", ["1"])
    theirs = read_scaling_data(tmp_path / "pot" / "scaling.data", n_sf)
    for e in ours:  # min, max, mean of the same structures (sigma: n2p2's own estimator;
        varying = theirs[e][:, 1] > theirs[e][:, 0]  # constant ones: rows made for n2p2)
        np.testing.assert_allclose(theirs[e][varying, :3], ours[e][varying, :3], 1e-10, 1e-13)


def test_mixed_cutoffs_are_refused(tmp_path: Path) -> None:
    acsf, model, _ = _potential(["tanh", "tanh", "identity"])
    spec = acsf.to_dict()
    spec["features"]["Cu"][0]["cutoff"] = "cos"
    assert "one cutoff_type" in n2p2_problems(ACSF.from_dict(spec), model)[0]


@pytest.mark.integration
def test_cli_export_n2p2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`dparallel export MODEL_DIR --format n2p2 -o DIR` writes the files and the LAMMPS lines."""
    from dparallel.cli.main import main
    from dparallel.n2p2.binaries import find_bin_dir
    from dparallel.train import TrainingSpec
    from dparallel.train.checkpoints import model_file

    acsf, model, structures = _potential(["tanh", "logistic", "identity"])
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    torch.save(model_file(model, TrainingSpec(), acsf.to_dict()), model_dir / "model.pt")
    argv = ["export", str(model_dir), "--format", "n2p2", "-o", str(tmp_path / "n2p2")]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["lammps"][1].startswith("pair_style hdnnp 5 dir ")
    assert report["lammps"][2].startswith("pair_coeff * * Cu Ag Au")
    # without --json, lines to read (JSON was printed either way), as export's other routes
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    weights = ", ".join(f"weights.{z:03d}.data" for z in (29, 47, 79))  # Cu, Ag, Au
    assert lines[0] == f"wrote {tmp_path / 'n2p2'}: input.nn, scaling.data, {weights} (ase units)"
    assert [line.strip() for line in lines[2:]] == report["lammps"]
    if find_bin_dir() is not None:
        write_input_data(tmp_path / "n2p2" / "input.data", structures)
        ref_e, _ = nnp_dataset(tmp_path / "n2p2")
        np.testing.assert_allclose(_predict(acsf, model, structures)["energy"], ref_e, rtol=1e-10)
    spec = TrainingSpec(descriptor="neighbor_sum")
    torch.save(model_file(model, spec, None), model_dir / "model.pt")
    assert main(["export", str(model_dir), "--format", "n2p2"]) != 0
    err = capsys.readouterr().err
    assert "n2p2 potentials use ACSF descriptors" in err and len(err.strip().splitlines()) == 1
    assert f"run it through `dparallel export {model_dir}`" in err  # the route that takes it


def test_lammps_lines_follow_the_pair_style_rules() -> None:
    """Cutoff rounded up within LAMMPS's 1 % tolerance; cflength/cfenergy as InterfaceLammps."""
    from dparallel.n2p2.potential import lammps_lines

    rc = 12 * Bohr  # n2p2's water example
    style = lammps_lines(Path("pot"), ["H", "O"], rc, Bohr, Hartree)[1].split()
    cut = float(style[2])
    assert rc <= cut < rc * 1.01
    opts = dict(zip(style[3::2], style[4::2], strict=True))
    assert float(opts["cflength"]) * Bohr == pytest.approx(1.0, rel=1e-14)  # Å → bohr
    assert float(opts["cfenergy"]) * Hartree == pytest.approx(1.0, rel=1e-14)  # E_Ha / cf = eV
    assert "cflength" not in lammps_lines(Path("pot"), ["H"], 5.0, 1.0, 1.0)[1]


@pytest.mark.parametrize(
    "change,reason",
    [
        ({"rs": -0.8}, r"rs -0\.8.*n2p2 computes an angular function's rs < 0 as rs = 0"),
        ({"zeta": 0.0}, r"zeta 0, lambda -1.*n2p2's forces are NaN with zeta or lambda 0"),
        ({"lambda": 0.0}, r"zeta 1, lambda 0.*n2p2's forces are NaN with zeta or lambda 0"),
    ],
)
def test_functions_n2p2_computes_otherwise_are_refused(
    tmp_path: Path, change: dict, reason: str
) -> None:
    """An angular rs < 0 (n2p2: rs = 0) and zeta or lambda 0 (n2p2: NaN forces) are named."""
    acsf, model, _ = _potential(["tanh", "tanh", "identity"])
    spec = acsf.to_dict()
    k = next(k for k, f in enumerate(spec["features"]["Ag"]) if f["type"] == 3)
    spec["features"]["Ag"][k].update(change)
    bad = ACSF.from_dict(spec)
    (problem,) = n2p2_problems(bad, model)
    assert problem.startswith(f"symmetry function {k} of Ag (type 3, ")
    with pytest.raises(ConfigError, match=reason):
        write_potential(bad, model, tmp_path)
    assert not (tmp_path / "input.nn").exists()


@pytest.mark.integration
def test_split_markers_written_and_read_as_n2p2_reads_them(n2p2_bin: Path, tmp_path: Path) -> None:
    """write_input_data puts info["set"] on the begin line, which nnp-dataset reads and
    dparallel takes as the tag; another begin argument is refused by both."""
    from dparallel.errors import InputFormatError
    from dparallel.io import open_source
    from dparallel.n2p2.binaries import N2p2RunError

    acsf, model, structures = _potential(["tanh", "tanh", "identity"])
    structures = structures[:4]
    write_potential(acsf, model, tmp_path)
    for atoms, tag in zip(structures, ["test", "train", None, "other"], strict=True):
        if tag:
            atoms.info["set"] = tag
    path = write_input_data(tmp_path / "input.data", structures)
    text = path.read_text()
    begins = [line for line in text.splitlines() if line.startswith("begin")]
    assert begins == ["begin set=test", "begin set=train", "begin", "begin"]
    assert list(open_source(path).read().tags) == ["test", "train", "", ""]
    assert len(nnp_dataset(tmp_path)[0]) == 4  # n2p2 reads the file
    path.write_text(text.replace("begin set=train", "begin foo"))
    with pytest.raises(N2p2RunError):
        nnp_dataset(tmp_path)
    line = text.splitlines().index("begin set=train") + 1
    with pytest.raises(InputFormatError, match=f"line {line}, .*unknown 'begin' argument 'foo'"):
        open_source(path).read()


DOCS = Path(__file__).resolve().parents[2] / "docs" / "n2p2.md"


@pytest.mark.integration
def test_a_cell_narrower_than_the_cutoff_keeps_n2p2s_energies_not_its_forces(
    n2p2_bin: Path, tmp_path: Path
) -> None:
    """The qualification of docs/n2p2.md's "within 1e-8" for exported potentials: on a cell
    narrower than the cutoff, nnp-dataset's energies equal dparallel's and central finite
    differences of them equal dparallel's forces, while n2p2's analytic forces differ."""
    acsf, model, _ = _potential(**EXPORTS["center_sigma-tanh"])
    atoms = alloy_structures(1, seed=14, small=True)[0]
    assert atoms.cell.lengths().max() < acsf.r_cut and len(atoms) == 4  # own images near
    h, moved = 1e-4, []
    for atom, axis in ((0, 2), (2, 0)):
        for step in (-2, -1, 1, 2):
            a = atoms.copy()
            a.positions[atom, axis] += step * h
            moved.append(a)
    write_potential(acsf, model, tmp_path)
    write_input_data(tmp_path / "input.data", [atoms, *moved])
    ref_e, ref_f = nnp_dataset(tmp_path)
    ours = _predict(acsf, model, [atoms, *moved])
    np.testing.assert_allclose(ours["energy"], ref_e, rtol=1e-12)
    forces = ours["forces"][:4]
    for k, (atom, axis) in enumerate(((0, 2), (2, 0))):
        e = ref_e[1 + 4 * k : 5 + 4 * k]  # steps -2, -1, 1, 2
        fd = -(e[0] - 8 * e[1] + 8 * e[2] - e[3]) / (12 * h)
        assert abs(forces[atom, axis] - fd) <= 1e-7 * np.abs(forces).max()
    # n2p2's own analytic forces for this cell: not the reference (if n2p2 is ever fixed,
    # this fails and docs/n2p2.md's qualification can go)
    assert np.abs(ref_f[0] - forces).max() > 1e-4 * np.abs(forces).max()


def test_the_docs_qualify_n2p2s_force_agreement_for_narrow_cells() -> None:
    """docs/n2p2.md states the 1e-8 agreement of exported potentials only with the
    exception the test above pins: cells narrower than the cutoff, where n2p2's forces are off."""
    text = " ".join(DOCS.read_text().split())
    start = text.index("`nnp-dataset` on the exported files gives dparallel's energies")
    paragraph = text[start : text.index("Refused, with the reason", start)]
    assert "narrower than the cutoff" in paragraph
    assert "finite differences" in paragraph and "1.3e-2 eV/Å" in paragraph


def test_the_export_of_a_model_of_bohr_hartree_data_is_evaluated_in_those_units(
    n2p2_bin: Path, tmp_path: Path
) -> None:
    """``export --format n2p2`` of a model trained from Bohr/Hartree n2p2 data: ``evaluate``
    of the potential on such a file read it as Å/eV (no ``data_units.json`` there), a force
    RMSE that looked plausible and was not. Against numpy over nnp-dataset's predictions of
    the same structures written in Å/eV."""
    from dparallel.cli.evaluate import evaluate_file
    from dparallel.train import TrainingSpec
    from dparallel.train.checkpoints import model_file

    acsf, model, structures = _potential(["tanh", "tanh", "identity"])
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    torch.save(model_file(model, TrainingSpec(), acsf.to_dict()), model_dir / "model.pt")
    record = {"data_units": "bohr-hartree", "data_format": "n2p2", "store": "s.zarr"}
    (model_dir / "data_units.json").write_text(json.dumps(record))
    export_model_dir(model_dir, tmp_path / "pot")
    write_input_data(tmp_path / "bohr.data", structures, units="bohr-hartree")
    got = evaluate_file(str(tmp_path / "pot"), str(tmp_path / "bohr.data"))

    reference = tmp_path / "reference"  # n2p2 on the potential's own files, in Å and eV
    shutil.copytree(tmp_path / "pot", reference)
    write_input_data(reference / "input.data", structures)
    energy, forces = nnp_dataset(reference)
    n = np.array([len(a) for a in structures])
    de = (energy - [a.get_potential_energy() for a in structures]) / n
    df = np.concatenate(forces) - np.concatenate([a.get_forces() for a in structures])
    assert got["energy_rmse"] == pytest.approx(np.sqrt(np.mean(de**2)), rel=1e-8)
    assert got["energy_mae"] == pytest.approx(np.mean(np.abs(de)), rel=1e-8)
    assert got["force_rmse"] == pytest.approx(np.sqrt(np.mean(df**2)), rel=1e-8)
    assert got["force_mae"] == pytest.approx(np.mean(np.abs(df)), rel=1e-8)
    (model_dir / "data_units.json").unlink()  # a model of Å/eV data: no record left behind
    export_model_dir(model_dir, tmp_path / "pot")
    assert not (tmp_path / "pot" / "data_units.json").exists()
