"""A small organic-molecule dataset (H, C, N, O) labelled with ASE's EMT calculator.

Molecules of ASE's G2 set, rattled and randomly rotated in a non-periodic box, with
energies in eV and forces in eV/Å from :class:`ase.calculators.emt.EMT` (ASE's EMT has
toy parameters for H, C, N and O: a stand-in for DFT labels, enough to run the molecules
workflow end to end without a download). Deterministic for a given seed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dparallel.datasets._write import write_once

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["MOLECULES", "generate_emt_molecules", "write_emt_molecules"]

#: G2 names used, every element of H, C, N, O present.
MOLECULES = ("CH4", "H2O", "NH3", "CH3OH", "C2H6", "HCN", "CO2", "C6H6", "CH3CHO", "HCOOH")


def generate_emt_molecules(n_structures: int = 200, seed: int = 0) -> list:
    """``n_structures`` labelled molecules (list of ``ase.Atoms``), cycling :data:`MOLECULES`."""
    from ase.build import molecule
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator

    rng = np.random.default_rng(seed)
    structures = []
    for index in range(n_structures):
        atoms = molecule(MOLECULES[index % len(MOLECULES)])
        atoms.rotate(float(rng.uniform(0, 360)), rng.normal(size=3), center="COP")
        atoms.positions += rng.normal(scale=rng.uniform(0.02, 0.08), size=atoms.positions.shape)
        atoms.calc = EMT()
        energy = atoms.get_potential_energy()
        forces = atoms.get_forces()
        atoms.calc = SinglePointCalculator(atoms, energy=energy, forces=forces)
        structures.append(atoms)
    return structures


def write_emt_molecules(path: str | Path, n_structures: int = 200, seed: int = 0) -> Path:
    """Write the dataset to an extxyz file unless it already exists; returns its path."""
    return write_once(path, lambda: generate_emt_molecules(n_structures, seed))
