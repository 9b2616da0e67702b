"""Random but valid structures for tests and benchmarks (ASE ``Atoms`` with energy/forces)."""

from __future__ import annotations

import numpy as np

__all__ = ["random_structures"]


def random_structures(
    n: int,
    rng: np.random.Generator,
    *,
    min_atoms: int = 1,
    max_atoms: int = 40,
    elements: tuple[int, ...] = (1, 6, 8, 14, 29),
    periodic_fraction: float = 0.5,
) -> list:
    """``n`` structures of mixed sizes; a ``periodic_fraction`` of them periodic (with a random
    non-singular cell), each labelled (a ``SinglePointCalculator``: energy (eV), forces (eV/Å))."""
    import ase
    from ase.calculators.singlepoint import SinglePointCalculator

    out = []
    for _ in range(n):
        k = int(rng.integers(min_atoms, max_atoms + 1))
        periodic = bool(rng.random() < periodic_fraction)
        cell = (
            (np.eye(3) * rng.uniform(5, 12, 3) + rng.normal(0, 0.5, (3, 3))) if periodic else None
        )
        atoms = ase.Atoms(
            numbers=rng.choice(elements, k),
            positions=rng.uniform(0, 8, (k, 3)),
            cell=cell,
            pbc=periodic,
        )
        atoms.calc = SinglePointCalculator(
            atoms, energy=float(rng.normal(-3 * k, 1)), forces=rng.normal(0, 1, (k, 3))
        )
        out.append(atoms)
    return out
