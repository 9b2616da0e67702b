"""The embedded default dataset: copper structures labelled with ASE's EMT calculator.

Bulk fcc cells under random strain with thermal-like rattling, bulk cells with vacancies,
and (100)/(111) slabs with vacuum; energies in eV and forces in eV/Å from
:class:`ase.calculators.emt.EMT`. Deterministic for a given seed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dparallel.datasets._write import write_once

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["generate_emt_cu", "write_emt_cu"]

_LATTICE = 3.61  # Å, close to EMT's Cu equilibrium


def generate_emt_cu(n_structures: int = 400, seed: int = 0) -> list:
    """Generate ``n_structures`` labelled Cu structures (list of ``ase.Atoms``).

    The mix is 50 % strained+rattled bulk, 25 % bulk with 1–2 vacancies, 25 % slabs.
    """
    from ase.build import bulk, fcc100, fcc111
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator

    rng = np.random.default_rng(seed)
    structures = []
    for index in range(n_structures):
        kind = ("bulk", "bulk", "vacancy", "slab")[index % 4]
        if kind == "slab":
            maker = fcc100 if rng.random() < 0.5 else fcc111
            atoms = maker("Cu", size=(2, 2, 4), a=_LATTICE, vacuum=6.0, periodic=True)
            rattle = rng.uniform(0.02, 0.12)
        else:
            atoms = bulk("Cu", "fcc", a=_LATTICE, cubic=True).repeat((2, 2, 2))
            strain = np.eye(3) + rng.uniform(-0.04, 0.04, size=(3, 3))
            strain = 0.5 * (strain + strain.T)
            atoms.set_cell(atoms.get_cell() @ strain, scale_atoms=True)
            if kind == "vacancy":
                for _ in range(int(rng.integers(1, 3))):
                    del atoms[int(rng.integers(len(atoms)))]
            rattle = rng.uniform(0.02, 0.15)
        atoms.positions += rng.normal(scale=rattle, size=atoms.positions.shape)
        atoms.calc = EMT()
        energy = atoms.get_potential_energy()
        forces = atoms.get_forces()
        atoms.calc = SinglePointCalculator(atoms, energy=energy, forces=forces)
        atoms.info.pop("adsorbate_info", None)  # slab-builder metadata extxyz cannot store
        atoms.info["kind"] = kind
        structures.append(atoms)
    return structures


def write_emt_cu(path: str | Path, n_structures: int = 400, seed: int = 0) -> Path:
    """Write the dataset to an extxyz file unless it already exists; returns its path."""
    return write_once(path, lambda: generate_emt_cu(n_structures, seed))
