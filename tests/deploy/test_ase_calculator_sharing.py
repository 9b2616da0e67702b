"""dparallel.ase.Calculator kept and shared as users do: one calculator in several threads,
sent to other processes (pickle) and copied (copy.deepcopy)."""

from __future__ import annotations

import copy
import pickle
import threading

import numpy as np
import pytest
from _deploy_models import hco_acsf, structures, write_model_dir

from dparallel.ase import Calculator
from dparallel.train.export import export_model

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):  # noqa: ANN001, ANN201
    path = write_model_dir(tmp_path_factory.mktemp("model"), hco_acsf())
    export_model(path, artifacts=False)
    return path


def _results(atoms, calc) -> tuple[float, np.ndarray]:  # noqa: ANN001
    a = atoms.copy()
    a.calc = calc
    return a.get_potential_energy(), a.get_forces()


def test_threads_sharing_one_calculator_get_their_own_atoms_results(model_dir) -> None:  # noqa: ANN001
    # same numbers and cell, other positions: what a race mixed up (1.1 eV off, unlocked)
    given = [structures()["periodic"].repeat(2) for _ in range(4)]
    for seed, atoms in enumerate(given):
        atoms.rattle(0.05, seed=seed)
    serial = [_results(atoms, Calculator(model_dir)) for atoms in given]
    found: dict[tuple[int, int, int], tuple[float, np.ndarray]] = {}
    errors: list[BaseException] = []
    for n in range(8):  # each a fresh calculator: its first calls raced most
        shared = Calculator(model_dir)
        barrier = threading.Barrier(len(given), timeout=60)

        def work(i: int, n: int = n, shared: Calculator = shared, barrier=barrier) -> None:  # noqa: ANN001
            barrier.wait()
            try:
                for k in range(3):
                    found[n, i, k] = _results(given[i], shared)
            except Exception as exc:  # noqa: BLE001 - a race's error: the test's failure
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert len(found) == 8 * len(given) * 3
    for (_, i, _), (energy, forces) in found.items():  # a reused list: rounding apart
        assert abs(energy - serial[i][0]) < 1e-12
        np.testing.assert_allclose(forces, serial[i][1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_pickled_or_copied_calculator_gives_the_same_results(model_dir, how) -> None:  # noqa: ANN001
    calc = Calculator(model_dir)
    atoms = structures()["periodic"]
    energy, forces = _results(atoms, calc)
    other = pickle.loads(pickle.dumps(calc)) if how == "pickle" else copy.deepcopy(calc)
    assert other is not calc and other.model is not calc.model
    for c in (other, calc):  # each its own state: both still give the results
        e, f = _results(atoms, c)
        assert e == energy
        np.testing.assert_array_equal(f, forces)
