"""A model trained on a featurized store, deployed: every supercell, other cell choice,
unwrapped, rotated, reflected, translated or permuted copy of a structure has n times the
original's energy (n its volume ratio) to round-off, the original's forces rotated with it
on each image atom and its stress rotated with it, through ``DeployedModel.predict`` and the
ASE calculator alike. Copies come from ASE's tools (tests/equivalent_structures.py); the
plain-torch files and the n2p2 export equal the calculator (test_artifacts.py,
tests/n2p2/test_potential_export.py)."""

from __future__ import annotations

import ase.io
import numpy as np
import pytest
from ase.stress import voigt_6_to_full_3x3_stress
from equivalent_structures import ELEMENTS, all_copies, image_of

from dparallel.ase import Calculator
from dparallel.deploy import load_deployed
from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.train import TrainingSpec
from dparallel.train import train as train_model
from dparallel.train.export import export_model
from dparallel.types import StructureBatch
from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """The copies, and a 2-epoch model trained on their store (ethanol's copies make some of
    its features constant over the data: the scaling must leave them alone)."""
    root = tmp_path_factory.mktemp("invariances")
    rows = all_copies()
    ase.io.write(root / "copies.traj", [c.atoms for c in rows])
    acsf = ACSF.uniform(ELEMENTS, r_cut=4.2, cutoff="cos", radial=[(0.5, 0.0), (1.0, 2.5)],
                        narrow=[(0.05, 1.0, -1.0, 0.0)], wide=[(0.1, 3.0, -1.0, 0.3)])  # fmt: skip
    store = featurize_in_process(root / "copies.traj", root / "copies.zarr",
                                 DescriptorSet(acsf=acsf, derivatives=True),
                                 FeaturizeOptions(partition_atoms=100))  # fmt: skip
    spec = TrainingSpec(epochs=2, hidden=(6, 6), batch_size=4, seed=1, lr=1e-2,
                        validation_fraction=0.0, test_fraction=0.0)  # fmt: skip
    train_model(store, root / "model", spec)
    export_model(root / "model", artifacts=False)
    return rows, root / "model"


def _predict(model, atoms) -> tuple[float, np.ndarray, np.ndarray | None]:  # noqa: ANN001
    periodic = bool(atoms.pbc.all())
    out = model.predict(StructureBatch.from_ase([atoms]), forces=True, stress=periodic)
    return float(out["energy"][0]), out["forces"], out["stress"][0] if periodic else None


def _calculator(calc: Calculator, atoms) -> tuple[float, np.ndarray, np.ndarray | None]:  # noqa: ANN001
    atoms = atoms.copy()
    atoms.calc = calc
    stress = voigt_6_to_full_3x3_stress(atoms.get_stress()) if atoms.pbc.all() else None
    return atoms.get_potential_energy(), atoms.get_forces(), stress


@pytest.mark.parametrize("route", ["predict", "calculator"])
def test_copies_give_the_originals_energy_forces_and_stress(trained, route: str) -> None:  # noqa: ANN001
    rows, model_dir = trained
    if route == "predict":
        model = load_deployed(model_dir)
        results = [_predict(model, c.atoms) for c in rows]
    else:
        calc = Calculator(model_dir)
        results = [_calculator(calc, c.atoms) for c in rows]
    first = {c.original: k for k, c in reversed(list(enumerate(rows)))}
    for copy, (energy, forces, stress) in zip(rows, results, strict=True):
        k = first[copy.original]
        e0, f0, s0 = results[k]
        where = f"{copy.original}/{copy.name}"
        assert energy == pytest.approx(copy.n * e0, rel=1e-13, abs=1e-12), where
        r = copy.rotation
        image = image_of(rows[k].atoms, copy)
        np.testing.assert_allclose(forces, f0[image] @ r.T, rtol=0, atol=1e-11, err_msg=where)
        if stress is not None:
            np.testing.assert_allclose(stress, r @ s0 @ r.T, rtol=0, atol=1e-12, err_msg=where)


def test_forces_are_minus_the_energy_gradient_on_every_kind(trained) -> None:  # noqa: ANN001
    rows, model_dir = trained
    model = load_deployed(model_dir)
    h = 1e-3  # five-point stencil: truncation ~h⁴
    for copy in rows:
        if copy.name not in ("original", "supercell moved"):
            continue
        atoms = copy.atoms
        _, forces, _ = _predict(model, atoms)
        rng = np.random.default_rng(len(atoms))
        for a, c in zip(rng.choice(len(atoms), 2), rng.integers(0, 3, 2), strict=True):
            e = []
            for step in (2, 1, -1, -2):
                moved = atoms.copy()
                moved.positions[a, c] += step * h
                e.append(_predict(model, moved)[0])
            fd = -(-e[0] + 8 * e[1] - 8 * e[2] + e[3]) / (12 * h)
            assert fd == pytest.approx(forces[a, c], abs=1e-8), f"{copy.original}/{copy.name}"
