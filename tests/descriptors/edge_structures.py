"""Structures the descriptor tests compare with DScribe and hippynn (tests only)."""

from __future__ import annotations

import ase
import numpy as np


def edge_structures(rng: np.random.Generator) -> list[ase.Atoms]:
    """Mixed pbc (a slab; a wire whose open axes have zero cell vectors), a molecule with a
    zero cell, a lone atom, an atom with no neighbour beside a molecule, an element absent
    from most structures, a huge vacuum box, positions several cells outside a skewed cell."""
    water = np.array([[0.0, 0.0, 0.0], [0.9572, 0.0, 0.0], [-0.2399872, 0.9266272, 0.0]])
    slab_cell = [[2.5, 0.0, 0.0], [0.9, 2.4, 0.0], [0.0, 0.0, 15.0]]
    return [
        ase.Atoms("H2OCu", scaled_positions=rng.random((4, 3)) * [1, 1, 0.3], cell=slab_cell,
                  pbc=[True, True, False]),
        ase.Atoms("HOCu", positions=rng.random((3, 3)) * [1.5, 1.5, 2.2],
                  cell=[[0, 0, 0], [0, 0, 0], [0.3, 0.1, 2.2]], pbc=[False, False, True]),
        ase.Atoms("H2O", positions=water, cell=np.zeros((3, 3)), pbc=False),
        ase.Atoms("O", positions=[[1.0, 2.0, 3.0]]),
        ase.Atoms("H2OCu", positions=[*water, [20.0, 20.0, 20.0]]),
        ase.Atoms("H2O", positions=water + np.array([-3.0, 48.0, 2.0]), cell=np.eye(3) * 100,
                  pbc=True),
        ase.Atoms("H2O", positions=water + np.array([-7.3, 11.2, 25.4]),
                  cell=[[3, 0, 0], [1, 3, 0], [0.5, 0.5, 3]], pbc=True),
    ]  # fmt: skip
