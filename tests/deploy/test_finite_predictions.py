"""A prediction that is not finite is an error naming the structure and the atom."""

from __future__ import annotations

import numpy as np
import pytest

from dparallel.deploy.finite import check_finite_predictions
from dparallel.errors import NonFiniteError
from dparallel.types import StructureBatch


def _batch() -> StructureBatch:
    import ase

    frames = [
        ase.Atoms("H2", positions=[[0, 0, 0], [0.7, 0, 0]]),
        ase.Atoms("OH2", positions=[[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]]),
    ]
    return StructureBatch.from_ase(frames)


def test_a_nan_force_names_structure_atom_and_element() -> None:
    batch = _batch()
    forces = np.zeros((5, 3))
    forces[3, 1] = np.nan  # structure 1, atom 1 (H)
    out = {"energy": np.zeros(2), "energies": np.zeros(5), "forces": forces}
    with pytest.raises(NonFiniteError, match=r"data.xyz: structure 11, atom 1 \(H at"):
        check_finite_predictions(out, batch, first=10, where="data.xyz: ")


def test_an_infinite_energy_and_finite_ones() -> None:
    batch = _batch()
    ok = {"energy": np.zeros(2), "energies": np.zeros(5), "forces": np.zeros((5, 3))}
    check_finite_predictions(ok, batch)
    bad = {**ok, "energy": np.array([0.0, np.inf])}
    with pytest.raises(NonFiniteError, match="structure 1: the predicted energy"):
        check_finite_predictions(bad, batch)
    bad = {**ok, "energies": np.array([0.0, 0.0, np.nan, 0.0, 0.0])}
    with pytest.raises(NonFiniteError, match=r"structure 1, atom 0 \(O .*atomic energy"):
        check_finite_predictions(bad, batch)
