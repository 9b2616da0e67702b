"""dparallel.ase.Calculator: a reused neighbour list (skin) gives a fresh list's results;
forces and stress are the finite differences of its energies."""

from __future__ import annotations

import numpy as np
import pytest
from _deploy_models import hco_acsf, hco_neighbor_sum, write_model_dir

from dparallel.ase import Calculator
from dparallel.train.export import export_model


def _trajectory(seed: int = 0):  # noqa: ANN202
    """A random walk of a periodic H/C/O cell (~0.03 Å per step), strained half-way."""
    from ase.build import bulk

    atoms = bulk("Cu", "fcc", a=3.3, cubic=True).repeat((2, 1, 1))
    atoms.set_chemical_symbols(["H", "C", "O", "C", "H", "O", "C", "O"])
    rng = np.random.default_rng(seed)
    for step in range(24):
        atoms.positions += rng.normal(0.0, 0.017, atoms.positions.shape)
        if step == 12:
            atoms.set_cell(atoms.cell.array * 1.002, scale_atoms=True)
        yield atoms


@pytest.mark.parametrize("kind", ["acsf", "neighbor_sum"])
def test_skin_list_gives_the_same_results_as_a_fresh_list(kind, tmp_path) -> None:  # noqa: ANN001
    descriptor = hco_acsf() if kind == "acsf" else hco_neighbor_sum()
    model_dir = write_model_dir(tmp_path, descriptor)
    export_model(model_dir, artifacts=False)
    reused, fresh = Calculator(model_dir, skin=0.3), Calculator(model_dir, skin=0.0)
    for atoms in _trajectory():
        results = []
        for calc in (reused, fresh):
            a = atoms.copy()
            a.calc = calc
            results.append((a.get_potential_energy(), a.get_forces(), a.get_stress()))
        assert abs(results[0][0] - results[1][0]) < 1e-12
        np.testing.assert_allclose(results[0][1], results[1][1], rtol=0, atol=1e-12)
        np.testing.assert_allclose(results[0][2], results[1][2], rtol=0, atol=1e-12)
    assert fresh.neighbor_list.statistics.builds == 24
    # reused, rebuilt after moves and the strain
    assert 2 <= reused.neighbor_list.statistics.builds <= 8


def test_calls_run_with_the_requested_torch_threads_and_restore_them(tmp_path) -> None:  # noqa: ANN001
    import torch

    model_dir = write_model_dir(tmp_path, hco_neighbor_sum())
    export_model(model_dir, artifacts=False)
    atoms = next(_trajectory())
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        for threads, expected in ((1, 1), (None, 2)):
            calc = Calculator(model_dir, threads=threads)
            seen = []
            predict = calc.model.predict

            def spy(*args, predict=predict, seen=seen, **kwargs):  # noqa: ANN002, ANN003, ANN202
                seen.append(torch.get_num_threads())
                return predict(*args, **kwargs)

            calc.model.predict = spy
            atoms.calc = calc
            atoms.get_forces()
            assert seen == [expected] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


def _spied_calculator(tmp_path):  # noqa: ANN001, ANN202
    """(model dir, its calculator, the ``stress`` argument of each model call it makes)."""
    model_dir = write_model_dir(tmp_path, hco_acsf())
    export_model(model_dir, artifacts=False)
    calc = Calculator(model_dir)
    calls: list[bool] = []
    predict = calc.model.predict

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(kwargs["stress"])
        return predict(*args, **kwargs)

    calc.model.predict = spy
    return model_dir, calc, calls


def test_recomputes_when_positions_numbers_cell_or_pbc_change_and_only_then(tmp_path) -> None:  # noqa: ANN001
    model_dir, calc, calls = _spied_calculator(tmp_path)
    atoms = next(_trajectory()).copy()
    atoms.calc = calc

    def check(expected_calls: int) -> None:
        forces, energy = atoms.get_forces(), atoms.get_potential_energy()
        assert len(calls) == expected_calls
        reference = atoms.copy()  # a fresh calculator on the torch route
        reference.calc = Calculator(model_dir, backend="torch")
        assert abs(energy - reference.get_potential_energy()) < 1e-10
        np.testing.assert_allclose(forces, reference.get_forces(), rtol=0, atol=1e-10)

    check(1)
    atoms.set_initial_charges(np.linspace(-0.1, 0.1, len(atoms)))  # not a model input
    check(1)
    atoms.positions[3, 1] += 0.01
    check(2)
    atoms.set_cell(atoms.cell.array * 1.01)
    check(3)
    atoms.pbc = [True, True, False]
    check(4)
    atoms.numbers[[0, 1]] = atoms.numbers[[1, 0]]
    check(5)
    kept = calc.atoms  # refreshed in place from here on: same arrays, no constraints
    assert kept is not atoms
    atoms.positions[5, 0] -= 0.02
    check(6)
    assert calc.atoms is kept
    for name in ("positions", "numbers", "initial_charges"):
        np.testing.assert_array_equal(kept.arrays[name], atoms.arrays[name])
    np.testing.assert_array_equal(kept.cell.array, atoms.cell.array)
    np.testing.assert_array_equal(kept.pbc, atoms.pbc)


def test_device_cpu_gives_the_default_results_and_absent_cuda_is_refused(tmp_path) -> None:  # noqa: ANN001
    import torch

    from dparallel.errors import DeviceError

    model_dir = write_model_dir(tmp_path, hco_acsf())
    export_model(model_dir, artifacts=False)
    atoms = next(_trajectory())
    results = []
    for calc in (Calculator(model_dir), Calculator(model_dir, device="cpu", backend="torch")):
        a = atoms.copy()
        a.calc = calc
        results.append((a.get_potential_energy(), a.get_forces(), a.get_stress()))
    assert abs(results[0][0] - results[1][0]) < 1e-10
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=0, atol=1e-10)
    assert results[1][0] != 0.0
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match=r"'cuda' asked for.*Calculator\(device='cpu'\)"):
            Calculator(model_dir, device="cuda")


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["acsf", "neighbor_sum"])
def test_cuda_calculator_matches_the_cpu(kind, tmp_path) -> None:  # noqa: ANN001
    descriptor = hco_acsf() if kind == "acsf" else hco_neighbor_sum()
    model_dir = write_model_dir(tmp_path, descriptor)
    export_model(model_dir, artifacts=False)
    atoms = next(_trajectory()).repeat((3, 3, 3))  # a larger cell
    results = []
    for device in ("cpu", "cuda"):
        a = atoms.copy()
        a.calc = Calculator(model_dir, device=device)
        results.append((a.get_potential_energy(), a.get_forces(), a.get_stress()))
    assert abs(results[0][0] - results[1][0]) < 1e-8
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=0, atol=1e-9)
    np.testing.assert_allclose(results[0][2], results[1][2], rtol=0, atol=1e-9)


def _edge_structures() -> dict[str, object]:
    """A cell narrower than the cutoff, a slab, a wire whose open axes have zero cell
    vectors, a molecule beside a lone atom (zero cell), atoms several cells outside."""
    import ase

    rng = np.random.default_rng(2)
    water = np.array([[0.0, 0.0, 0.0], [0.9572, 0.0, 0.0], [-0.24, 0.93, 0.0]])
    far = np.vstack([water, [0.5, 0.5, 1.5]]) + np.array([-7.3, 11.0, 25.0])
    return {
        "narrow": ase.Atoms("HCO", scaled_positions=rng.random((3, 3)),
                            cell=[[2.2, 0, 0], [1.9, 1.1, 0], [1.6, 0.6, 1.3]], pbc=True),
        "slab": ase.Atoms("HCOO", positions=rng.random((4, 3)) * 2.0 + [0, 0, 5],
                          cell=[[2.5, 0, 0], [0.9, 2.4, 0], [0, 0, 15]], pbc=[True, True, False]),
        "wire": ase.Atoms("HCO", positions=rng.random((3, 3)) * 1.5,
                          cell=[[0, 0, 0], [0, 0, 0], [0.3, 0.1, 2.2]], pbc=[False, False, True]),
        "lone": ase.Atoms("OHHC", positions=[*water, [20.0, 20.0, 20.0]]),
        "outside": ase.Atoms("OHHC", positions=far,
                             cell=[[3, 0, 0], [1, 3, 0], [0.5, 0.5, 3]], pbc=True),
    }  # fmt: skip


@pytest.mark.parametrize("kind", ["acsf", "neighbor_sum"])
def test_forces_and_stress_equal_finite_differences_of_the_energy(kind, tmp_path) -> None:  # noqa: ANN001
    """Forces = −∂E/∂r and stress = ∂E/∂ε / V by central differences (h = 1e-5 Å, 1e-6),
    ΣF = 0, and E, F invariant under rotation plus translation and permutation."""
    from scipy.spatial.transform import Rotation

    descriptor = hco_acsf() if kind == "acsf" else hco_neighbor_sum()
    model_dir = write_model_dir(tmp_path, descriptor)
    export_model(model_dir, artifacts=False)
    calc = Calculator(model_dir, skin=0.0)

    def energy(atoms) -> float:  # noqa: ANN001
        atoms = atoms.copy()
        atoms.calc = calc
        return atoms.get_potential_energy()

    rot = Rotation.random(random_state=7).as_matrix()
    for name, atoms in _edge_structures().items():
        a = atoms.copy()
        a.calc = calc
        e0, forces = a.get_potential_energy(), a.get_forces()
        h, fd = 1e-5, np.zeros_like(forces)
        for k, x in np.ndindex(*forces.shape):
            plus, minus = atoms.copy(), atoms.copy()
            plus.positions[k, x] += h
            minus.positions[k, x] -= h
            fd[k, x] = -(energy(plus) - energy(minus)) / (2 * h)
        np.testing.assert_allclose(forces, fd, rtol=0, atol=1e-7, err_msg=name)
        assert np.abs(forces.sum(0)).max() < 1e-14, name
        if atoms.pbc.all():
            eps, strain_fd = 1e-6, np.zeros((3, 3))
            for i, j in np.ndindex(3, 3):
                de = []
                for sign in (1, -1):
                    strained = atoms.copy()
                    strain = np.eye(3)
                    strain[i, j] += sign * eps
                    strained.set_cell(atoms.cell[:] @ strain, scale_atoms=True)
                    de.append(energy(strained))
                strain_fd[i, j] = (de[0] - de[1]) / (2 * eps) / atoms.get_volume()
            stress = a.get_stress(voigt=False)
            np.testing.assert_allclose(stress, strain_fd, rtol=0, atol=3e-7, err_msg=name)
        moved = atoms[np.arange(len(atoms))[::-1]]
        moved.set_cell(moved.cell[:] @ rot.T, scale_atoms=False)
        moved.positions = moved.positions @ rot.T + [0.7, -1.3, 2.2]
        moved.calc = calc
        assert moved.get_potential_energy() == pytest.approx(e0, rel=0, abs=1e-9), name
        np.testing.assert_allclose(moved.get_forces(), forces[::-1] @ rot.T, rtol=0, atol=1e-12)


def test_calculate_on_changed_atoms_keeps_no_result_of_the_old_ones(tmp_path) -> None:  # noqa: ANN001
    """``calc.calculate(atoms, ["energy"])`` called directly (as ASE's own code and users
    do) after the atoms changed: a stress of the old atoms must not be returned for them."""
    model_dir = write_model_dir(tmp_path, hco_acsf())
    export_model(model_dir, artifacts=False)
    calc = Calculator(model_dir)
    atoms = next(_trajectory()).copy()
    calc.calculate(atoms, ["stress"])
    atoms.positions[2] += [0.1, -0.05, 0.02]
    atoms.set_cell(atoms.cell.array @ np.diag([1.03, 0.99, 1.01]), scale_atoms=True)
    calc.calculate(atoms, ["energy"])
    fresh = Calculator(model_dir, skin=0)

    def energy(strain: np.ndarray) -> float:
        strained = atoms.copy()
        strained.set_cell(atoms.cell.array @ strain, scale_atoms=True)
        return fresh.get_potential_energy(strained)

    eps, strain_fd = 1e-6, np.zeros((3, 3))
    for i, j in np.ndindex(3, 3):
        step = np.zeros((3, 3))
        step[i, j] = eps
        strain_fd[i, j] = (energy(np.eye(3) + step) - energy(np.eye(3) - step)) / (2 * eps)
    strain_fd /= atoms.get_volume()
    atoms.calc = calc
    np.testing.assert_allclose(atoms.get_stress(voigt=False), strain_fd, rtol=0, atol=3e-7)


def test_once_asked_for_the_stress_comes_with_the_forces(tmp_path) -> None:  # noqa: ANN001
    """ASE's NPT asks for forces, then the stress, of every state: after the first stress
    each step costs one model call, not two; plain MD (forces only) pays for no stress.
    The stress so given is ASE's numerical one."""
    from ase import units
    from ase.calculators.fd import calculate_numerical_stress

    try:
        from ase.md.melchionna import MelchionnaNPT as NPT
    except ImportError:  # older ase: the same integrator under its old name
        from ase.md.npt import NPT

    model_dir, calc, calls = _spied_calculator(tmp_path)
    atoms = next(_trajectory()).copy()
    atoms.calc = calc
    atoms.get_forces()
    assert calls == [False]
    atoms.get_stress()
    assert calls == [False, True]
    npt = NPT(atoms, 0.5 * units.fs, temperature_K=300, externalstress=0.0,
              ttime=25 * units.fs, pfactor=(75 * units.fs) ** 2 * 100 * units.GPa)  # fmt: skip
    npt.run(1)
    before, steps = len(calls), 4
    npt.run(steps)
    assert calls[before:] == [True] * steps
    strained = atoms.copy()
    strained.calc = Calculator(model_dir)
    fd = calculate_numerical_stress(strained, eps=1e-6)
    np.testing.assert_allclose(atoms.get_stress(), fd, rtol=0, atol=3e-7)
