"""Small structures made of a model's own elements: trace examples, checks and warm-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass
class Structure:
    """A probe structure: a name, the artifact's seven input tensors and the atoms."""

    name: str
    inputs: tuple[Tensor, ...]
    atoms: Any = None  # the ase.Atoms it was made from


def probe_atoms(elements: Sequence[str]) -> list[Any]:
    """A rattled periodic fcc cell (8 atoms) and a non-periodic cluster (5 atoms).

    Elements are assigned cyclically; the fcc nearest-neighbour distance is the largest
    sum of two covalent radii of ``elements``, so every element pair sits at a bonding
    distance. The sizes differ so that a graph specialised to one size fails on the other.
    """
    from ase.build import bulk
    from ase.data import atomic_numbers, covalent_radii

    radii = [covalent_radii[atomic_numbers[e]] for e in elements]
    a = 2.0**0.5 * 2.0 * max(radii)  # fcc: nearest neighbours at a/√2
    cell = bulk("Cu", "fcc", a=a, cubic=True).repeat((2, 1, 1))
    cell.set_chemical_symbols([elements[k % len(elements)] for k in range(len(cell))])
    cell.rattle(0.03 * a, seed=7)
    cluster = cell[[4, 3, 2, 1, 0]]
    cluster.pbc = False
    return [cell, cluster]


def inputs_from_atoms(atoms: Any, cutoff: float, dtype: torch.dtype) -> tuple[Tensor, ...]:
    """The seven artifact inputs of an ``ase.Atoms`` (neighbour list by vesin)."""
    from dparallel.neighbors import neighbor_list
    from dparallel.types import StructureBatch

    nb = neighbor_list(StructureBatch.from_ase([atoms]), cutoff)
    return (
        torch.tensor(atoms.positions, dtype=dtype),
        torch.tensor(atoms.numbers, dtype=torch.long),
        torch.tensor(atoms.cell.array, dtype=dtype),
        torch.tensor(atoms.pbc, dtype=torch.bool),
        torch.from_numpy(nb.pair_first),
        torch.from_numpy(nb.pair_second),
        torch.from_numpy(nb.shifts).to(dtype),
    )


def probe_structures(
    elements: Sequence[str], cutoff: float, dtype: torch.dtype = torch.float64
) -> list[Structure]:
    """:func:`probe_atoms` as named artifact inputs."""
    out = []
    for atoms in probe_atoms(elements):
        kind = "periodic fcc" if atoms.pbc.all() else "cluster"
        name = f"{atoms.get_chemical_formula()} {kind}"
        out.append(Structure(name, inputs_from_atoms(atoms, cutoff, dtype), atoms))
    return out
