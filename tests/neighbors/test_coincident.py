"""Atoms at one place are refused by every descriptor's ``compute``, naming them, where
ACSF returned NaN (each engine its own way) and NeighborSum named nothing."""

from __future__ import annotations

import numpy as np
import pytest
from ase import Atoms

from dparallel.descriptors import ACSF, NeighborSum
from dparallel.errors import DescriptorError


def _structures() -> list[Atoms]:
    fine = Atoms("Cu2", positions=[(0, 0, 0), (2.5, 0, 0)])
    overlapping = Atoms("Cu3", positions=[(0, 0, 0), (2.5, 0, 0), (2.5, 0, 0)])
    image = Atoms("Cu2", positions=[(0, 0, 0), (3.0, 0, 0)], cell=[3.0, 6, 6], pbc=True)
    return [fine, overlapping, image]


@pytest.mark.parametrize("backend", ["torch", "numba"])
def test_acsf_refuses_atoms_at_one_place_naming_them(backend: str) -> None:
    acsf = ACSF.uniform(["Cu"], 4.0, radial=[(0.1, 0.0)], narrow=[(0.1, 1.0, 1.0, 0.0)])
    structures = _structures()
    with pytest.raises(DescriptorError, match=r"structure 1: atoms 1 and 2 are at the same"):
        acsf.compute(structures[:2], derivatives=True, backend=backend)
    # atom 1 sits on atom 0's periodic image: the message says which atoms
    with pytest.raises(DescriptorError, match=r"structure 0: atoms 0 and 1 are at the same"):
        acsf.compute([structures[2]], backend=backend)
    values = acsf.compute([structures[0]], derivatives=True, backend=backend)
    assert all(np.isfinite(r.values.numpy()).all() for r in values.values())


def test_neighbor_sum_names_the_structure_and_atoms() -> None:
    with pytest.raises(DescriptorError, match=r"structure 1: atoms 1 and 2 are at the same"):
        NeighborSum(["Cu"], 4.0).compute(_structures()[:2], derivatives=True)
