"""Physics of the trained and exported model: forces vs finite differences and autograd,
invariances, stress, exported == in-training, ASE NVE energy conservation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _store_fixture import small_store, training_route

from dparallel.deploy import load_deployed
from dparallel.train import (
    TrainingSpec,
)
from dparallel.train import train as train_model
from dparallel.train.export import export_model
from dparallel.types import StructureBatch


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    root = tmp_path_factory.mktemp("model")
    store = small_store(root, n=24)
    spec = TrainingSpec(epochs=3, hidden=(8, 8), batch_size=4, seed=2, lr=1e-2)
    train_model(store, root / "m", spec)
    report = export_model(root / "m", artifacts=False)  # artifacts: tests/deploy
    assert report["files"] == ["deployed.pt", "lammps.model", "atomic_energy_Cu.pt2"]
    return store, root / "m"


def _rattled_cell(seed: int = 0) -> StructureBatch:
    from ase.build import bulk

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((2, 2, 2))
    atoms.set_cell(atoms.cell.array @ np.array([[1.02, 0.01, 0], [0.01, 0.98, 0], [0, 0, 1.01]]),
                   scale_atoms=True)  # fmt: skip
    atoms.rattle(0.08, seed=seed)
    return StructureBatch.from_ase([atoms])


def test_forces_equal_minus_gradient_by_finite_differences(trained) -> None:  # noqa: ANN001
    _, model_dir = trained
    model = load_deployed(model_dir)
    batch = _rattled_cell()
    out = model.predict(batch, forces=True)
    f = out["forces"]
    assert np.abs(f.sum(0)).max() < 1e-10  # Newton's third law through the pair terms
    pos = torch.from_numpy(batch.positions.copy()).requires_grad_(True)
    g = torch.autograd.grad(model.energy(batch, pos).sum(), pos)[0].numpy()
    np.testing.assert_allclose(f, -g, atol=1e-10)  # stored-derivative route == autograd
    h = 1e-4
    nb = model.neighbors(batch)  # same pairs: displacements ≪ skin to the cutoff
    rng = np.random.default_rng(0)
    for i, c in zip(rng.choice(batch.n_atoms, 6, replace=False), rng.integers(0, 3, 6),
                    strict=True):  # fmt: skip
        e = []
        for sgn in (1, -1):
            p = batch.positions.copy()
            p[i, c] += sgn * h
            e.append(float(model.energy(batch, torch.from_numpy(p), nb)[0].detach()))
        assert abs(-(e[0] - e[1]) / (2 * h) - f[i, c]) < 1e-7


def test_stress_matches_strain_derivative(trained) -> None:  # noqa: ANN001
    _, model_dir = trained
    model = load_deployed(model_dir)
    batch = _rattled_cell(1)
    s = model.predict(batch, stress=True)["stress"][0]
    vol = abs(np.linalg.det(batch.cells[0]))
    eps = 1e-5
    for a, b in ((0, 0), (1, 2), (2, 2), (0, 1)):
        d = np.zeros((3, 3))
        d[a, b] += eps / 2
        d[b, a] += eps / 2
        e = []
        for sgn in (1, -1):
            m = np.eye(3) + sgn * d
            strained = StructureBatch(
                numbers=batch.numbers, positions=batch.positions @ m, cells=batch.cells @ m,
                pbc=batch.pbc, energy=batch.energy, forces=batch.forces, offsets=batch.offsets,
            )  # fmt: skip
            e.append(float(model.predict(strained, forces=False)["energy"][0]))
        assert abs((e[0] - e[1]) / (2 * eps) / vol - s[a, b]) < 1e-8


def test_energy_invariant_under_rotation_translation_permutation(trained) -> None:  # noqa: ANN001
    from scipy.spatial.transform import Rotation

    _, model_dir = trained
    model = load_deployed(model_dir)
    batch = _rattled_cell(2)
    ref = model.predict(batch)
    rot = Rotation.random(random_state=4).as_matrix()
    perm = np.random.default_rng(5).permutation(batch.n_atoms)
    moved = StructureBatch(
        numbers=batch.numbers[perm],
        positions=batch.positions[perm] @ rot.T + np.array([0.3, -1.7, 2.2]),
        cells=batch.cells @ rot.T,
        pbc=batch.pbc, energy=batch.energy, forces=batch.forces[perm], offsets=batch.offsets,
    )  # fmt: skip
    out = model.predict(moved)
    assert abs(out["energy"][0] - ref["energy"][0]) < 1e-10
    np.testing.assert_allclose(out["forces"], ref["forces"][perm] @ rot.T, atol=1e-10)


def test_exported_model_equals_in_training_model(trained) -> None:  # noqa: ANN001
    store, model_dir = trained
    _, e_train, f_train = training_route(store, model_dir, 1, ["Cu"])
    structures = store.read_partition(1)
    out = load_deployed(model_dir).predict(structures)
    np.testing.assert_allclose(out["energy"], e_train.detach().numpy(), rtol=0, atol=1e-9)
    # the training route reads dG/dr stored in float32 (store format 2): agreement to
    # float32 rounding of the per-pair terms, relative to the largest force component
    f_ref = f_train.detach().numpy()
    np.testing.assert_allclose(out["forces"], f_ref, rtol=0, atol=2e-6 * np.abs(f_ref).max())


def _nve_total_energies(atoms, calc) -> np.ndarray:  # noqa: ANN001
    """Total energy per atom at each of 150 velocity-Verlet steps of 1 fs from 300 K."""
    from ase import units
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution
    from ase.md.verlet import VelocityVerlet

    atoms = atoms.copy()
    atoms.calc = calc
    MaxwellBoltzmannDistribution(atoms, temperature_K=300, rng=np.random.default_rng(0))
    dyn = VelocityVerlet(atoms, timestep=1.0 * units.fs)
    totals = []
    dyn.attach(lambda: totals.append(atoms.get_total_energy()), interval=1)
    dyn.run(150)
    assert atoms.get_kinetic_energy() > 0.01  # it moved
    return np.array(totals) / len(atoms)


def test_nve_md_conserves_energy(trained) -> None:  # noqa: ANN001
    """VelocityVerlet on a periodic Cu cell from the EMT dataset, 150 steps of 1 fs.

    Bound: velocity Verlet conserves a shadow energy; the visible fluctuation of E_tot is
    O(dt²) and set by the curvature of the potential. The reference potential itself
    (ASE's EMT), integrated identically from the same state, fluctuates by ~4e-5 eV/atom.
    A smooth NNP of the same physics must do no worse than 3× that, and never more than
    1e-4 eV/atom; a wrong force (not −∇E) shows up as a drift orders of magnitude larger.
    """
    from ase.calculators.emt import EMT

    from dparallel.ase import Calculator
    from dparallel.datasets import generate_emt_cu

    atoms = generate_emt_cu(1, seed=11)[0]  # strained, rattled periodic bulk
    assert all(atoms.pbc)
    emt = _nve_total_energies(atoms, EMT())
    nnp = _nve_total_energies(atoms, Calculator(trained[1]))
    emt_dev = np.abs(emt - emt[0]).max()
    nnp_dev = np.abs(nnp - nnp[0]).max()
    assert nnp_dev < min(3 * emt_dev, 1e-4), (nnp_dev, emt_dev)
    assert abs(nnp[-50:].mean() - nnp[0]) < 5e-5
    atoms.calc = Calculator(trained[1])
    s = atoms.get_stress()
    assert s.shape == (6,) and np.all(np.isfinite(s))


def test_torch_exported_element_networks_reproduce_energies_and_forces(trained) -> None:  # noqa: ANN001
    """atomic_energy_<E>.pt2 (torch.export, dynamic atoms) == the in-training model."""
    from dparallel.deploy import load_atomic_energies
    from dparallel.descriptors import forces_from_derivatives

    store, model_dir = trained
    nets = load_atomic_energies(model_dir)
    assert set(nets) == {"Cu"}
    batch, e_ref, f_ref = training_route(store, model_dir, 0, ["Cu"])
    assert batch.features is not None
    res = batch.features["Cu"]
    values = res.values.clone().requires_grad_(True)
    atomic = nets["Cu"](values)  # (n,)
    energy = torch.zeros(batch.n_structures, dtype=atomic.dtype).index_add(
        0, batch.structure_index[res.atom_index], atomic
    )
    (g,) = torch.autograd.grad(energy.sum(), values)
    forces = forces_from_derivatives({"Cu": g}, batch.features, batch.n_atoms)
    torch.testing.assert_close(energy.detach(), e_ref.detach(), rtol=0, atol=1e-10)
    torch.testing.assert_close(forces, f_ref.detach(), rtol=0, atol=1e-10)
    assert nets["Cu"](values[:1]).shape == (1,) and nets["Cu"](values[:0]).shape == (0,)
