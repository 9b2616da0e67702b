"""Small generated datasets for demos and tests (no download needed): energies (eV) and
forces (eV/Å) from ASE's :class:`~ase.calculators.emt.EMT`, deterministic for a given seed,
written to an extxyz file once by ``write_*``. ASE's EMT has toy parameters for H, C, N and
O: a stand-in for DFT labels, enough to run the molecules workflow end to end.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dparallel._files import write_with

if TYPE_CHECKING:
    from collections.abc import Callable

    import ase

__all__ = [
    "MOLECULES",
    "generate_emt_cu",
    "generate_emt_molecules",
    "write_emt_cu",
    "write_emt_molecules",
]

logger = logging.getLogger(__name__)

_LATTICE = 3.61  # Å, close to EMT's Cu equilibrium
#: G2 names used, every element of H, C, N, O present.
MOLECULES = ("CH4", "H2O", "NH3", "CH3OH", "C2H6", "HCN", "CO2", "C6H6", "CH3CHO", "HCOOH")


def _labelled(atoms: ase.Atoms) -> ase.Atoms:
    """``atoms`` with EMT's energy and forces kept in a ``SinglePointCalculator``."""
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator

    atoms.calc = EMT()
    energy, forces = atoms.get_potential_energy(), atoms.get_forces()
    atoms.calc = SinglePointCalculator(atoms, energy=energy, forces=forces)
    return atoms


def generate_emt_cu(n_structures: int = 400, seed: int = 0) -> list:
    """``n_structures`` labelled Cu structures (list of ``ase.Atoms``), the embedded default:
    50 % bulk fcc cells under random strain with thermal-like rattling, 25 % bulk with 1–2
    vacancies, 25 % (100)/(111) slabs with vacuum."""
    from ase.build import bulk, fcc100, fcc111

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
        structures.append(_labelled(atoms))
        atoms.info.pop("adsorbate_info", None)  # slab-builder metadata extxyz cannot store
        atoms.info["kind"] = kind
    return structures


def generate_emt_molecules(n_structures: int = 200, seed: int = 0) -> list:
    """``n_structures`` labelled molecules (list of ``ase.Atoms``) of ASE's G2 set, cycling
    :data:`MOLECULES`, rattled and randomly rotated in a non-periodic box."""
    from ase.build import molecule

    rng = np.random.default_rng(seed)
    structures = []
    for index in range(n_structures):
        atoms = molecule(MOLECULES[index % len(MOLECULES)])
        atoms.rotate(float(rng.uniform(0, 360)), rng.normal(size=3), center="COP")
        atoms.positions += rng.normal(scale=rng.uniform(0.02, 0.08), size=atoms.positions.shape)
        structures.append(_labelled(atoms))
    return structures


def _write_once(path: str | Path, generate: Callable[[], list]) -> Path:
    """Write ``generate()`` to an extxyz file unless it already exists; returns its path."""
    import ase.io

    path = Path(path)
    if path.exists():
        logger.info("dataset %s exists, not regenerating", path)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    structures = generate()
    # a new file renamed into place: a half-written file never looks complete
    write_with(path, lambda tmp: ase.io.write(tmp, structures, format="extxyz"), suffix=".extxyz")
    return path


def write_emt_cu(path: str | Path, n_structures: int = 400, seed: int = 0) -> Path:
    """Write :func:`generate_emt_cu`'s dataset to an extxyz file unless it exists already."""
    return _write_once(path, lambda: generate_emt_cu(n_structures, seed))


def write_emt_molecules(path: str | Path, n_structures: int = 200, seed: int = 0) -> Path:
    """Write :func:`generate_emt_molecules`'s dataset to an extxyz file unless it exists."""
    return _write_once(path, lambda: generate_emt_molecules(n_structures, seed))
