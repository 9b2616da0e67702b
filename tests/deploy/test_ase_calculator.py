"""dparallel.ase.Calculator: a reused neighbour list (skin) gives a fresh list's results."""

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


def test_recomputes_when_positions_numbers_cell_or_pbc_change_and_only_then(tmp_path) -> None:  # noqa: ANN001
    model_dir = write_model_dir(tmp_path, hco_acsf())
    export_model(model_dir, artifacts=False)
    calc = Calculator(model_dir)
    calls = []
    predict = calc.model.predict

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return predict(*args, **kwargs)

    calc.model.predict = spy
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
        with pytest.raises(DeviceError, match="'cuda' asked for"):
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
