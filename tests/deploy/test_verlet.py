"""VerletList (neighbour list with a skin) against a fresh list at every step."""

from __future__ import annotations

import numpy as np
import pytest
from ase.build import bulk

from dparallel.deploy.verlet import VerletList
from dparallel.errors import DescriptorError
from dparallel.neighbors import neighbor_list
from dparallel.types import StructureBatch

CUTOFF = 4.0


def _within(nb, cutoff: float) -> dict[tuple, np.ndarray]:  # noqa: ANN001
    """(i, j, shift) → r_ij of the pairs closer than ``cutoff``."""
    keep = np.flatnonzero(nb.distances < cutoff)
    return {
        (int(nb.pair_first[p]), int(nb.pair_second[p]), *map(int, nb.shifts[p])): nb.vectors[p]
        for p in keep
    }


def _assert_same_pairs(got, fresh) -> None:  # noqa: ANN001
    a, b = _within(got, CUTOFF), _within(fresh, CUTOFF)
    assert a.keys() == b.keys()
    for key, vec in a.items():
        np.testing.assert_allclose(vec, b[key], rtol=0, atol=1e-12)


def test_reused_list_equals_fresh_list_along_a_random_walk() -> None:
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((2, 2, 2))
    atoms.cell = atoms.cell.array @ np.array([[1.0, 0.05, 0.0], [0.0, 1.0, 0.1], [0.0, 0.0, 1.0]])
    rng = np.random.default_rng(0)
    verlet = VerletList(CUTOFF, skin=0.3)
    steps = 40
    for _ in range(steps):
        atoms.positions += rng.normal(0.0, 0.02, atoms.positions.shape)  # ~0.035 Å per step
        batch = StructureBatch.from_ase([atoms])
        got = verlet.neighbors(batch)
        _assert_same_pairs(got, neighbor_list(batch, CUTOFF))
        assert np.all(np.diff(got.pair_first) >= 0)  # still sorted by centre
    assert 1 < verlet.statistics.builds < steps / 3  # reused, and rebuilt when atoms moved > skin/2
    assert verlet.statistics.calls == steps


@pytest.mark.parametrize("change", ["cell", "pbc", "numbers", "natoms", "jump", "move"])
def test_list_is_rebuilt_when_the_structure_changes(change: str) -> None:
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((2, 2, 1))
    verlet = VerletList(CUTOFF, skin=0.5)
    verlet.neighbors(StructureBatch.from_ase([atoms]))
    verlet.neighbors(StructureBatch.from_ase([atoms]))
    assert verlet.statistics == (1, 2)
    if change == "cell":
        atoms.set_cell(atoms.cell.array * 1.001, scale_atoms=False)
    elif change == "pbc":
        atoms.pbc = [True, True, False]
    elif change == "numbers":
        atoms.numbers[3] = 28
    elif change == "natoms":
        del atoms[0]
    elif change == "jump":
        atoms.positions[5] += [0.0, 0.0, 0.26]  # just beyond skin/2
    else:
        atoms.positions[5] += [0.0, 0.0, 0.24]  # within skin/2: the list is kept
    batch = StructureBatch.from_ase([atoms])
    got = verlet.neighbors(batch)
    assert verlet.statistics == ((1 if change == "move" else 2), 3)
    _assert_same_pairs(got, neighbor_list(batch, CUTOFF))


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(DescriptorError, match="skin >= 0"):
        VerletList(4.0, skin=-0.1)
    atoms = bulk("Cu", "fcc", a=3.61)
    with pytest.raises(DescriptorError, match="one structure, got 2"):
        VerletList(4.0).neighbors(StructureBatch.from_ase([atoms, atoms]))
