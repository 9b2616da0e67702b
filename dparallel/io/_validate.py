"""Shared checks that every reader applies to each structure it returns."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from dparallel.types import StructureBatch

__all__ = ["Problem", "find_problems", "validate_batch"]

#: Largest atomic number accepted (ASE knows elements up to 118).
MAX_Z = 118

#: Largest plausible coordinate or cell entry, in the file's length unit (Å or Bohr): far
#: beyond any atomistic structure, and where a float32 position still resolves ~0.01
#: (docs/io.md). A larger value is a unit or format mistake (e.g. 1e30), never data.
MAX_COORDINATE = 1e5


class Problem(NamedTuple):
    """Why a structure is invalid, and the atom (its index in the structure) that shows it."""

    reason: str
    atom: int | None = None


def validate_batch(batch: StructureBatch) -> dict[int, str]:
    """``{local index: reason}`` for the invalid structures of ``batch`` (:func:`find_problems`)."""
    return {s: problem.reason for s, problem in find_problems(batch).items()}


def find_problems(batch: StructureBatch) -> dict[int, Problem]:
    """Check each structure of ``batch``; return ``{local index: problem}`` for invalid ones:
    no atoms, atomic numbers outside 1..118, non-finite positions, cells or energies (NaN
    energy: absent), positions or cell entries beyond ±:data:`MAX_COORDINATE`, forces neither
    finite nor all NaN (absent), a singular cell along the periodic directions. Vectorised
    over atoms; loops only over the (rare) bad structures."""
    n = batch.n_structures
    if n == 0:
        return {}
    counts = batch.atom_counts  # (S,)
    sidx = batch.structure_index  # (N,)
    bad: dict[int, Problem] = {}

    def flag(structures: np.ndarray, reason: str) -> None:
        for s in np.flatnonzero(structures):
            bad.setdefault(int(s), Problem(reason))

    def flag_atoms(atoms: np.ndarray, reason: str) -> None:
        """The first flagged atom of each structure: ``reason`` with its ``{z}`` and ``{xyz}``."""
        rows = np.flatnonzero(atoms)
        for r in rows[np.unique(sidx[rows], return_index=True)[1]]:
            s = int(sidx[r])
            what = reason.format(z=batch.numbers[r], xyz=batch.positions[r].tolist())
            atom = int(r - batch.offsets[s])
            bad.setdefault(s, Problem(f"atom {atom}: {what}", atom))

    far = f" (beyond ±{MAX_COORDINATE:g}; see docs/io.md)"
    flag(counts == 0, "structure has no atoms")
    flag_atoms((batch.numbers < 1) | (batch.numbers > MAX_Z), "unknown element (atomic number {z})")
    flag_atoms(~np.isfinite(batch.positions).all(axis=1), "non-finite coordinates {xyz}")
    huge = np.isfinite(batch.positions) & (np.abs(batch.positions) > MAX_COORDINATE)
    flag_atoms(huge.any(axis=1), "implausible coordinates {xyz}" + far)
    finite_f = np.isfinite(batch.forces).all(axis=1)  # (N,)
    nan_f = np.isnan(batch.forces).all(axis=1)  # (N,)
    n_finite = np.bincount(sidx, weights=finite_f, minlength=n)
    n_nan = np.bincount(sidx, weights=nan_f, minlength=n)
    for s in np.flatnonzero((n_finite != counts) & (n_nan != counts)):
        row = int(np.flatnonzero(~finite_f[batch.offsets[s] : batch.offsets[s + 1]])[0])
        why = f"atom {row}: non-finite forces (NaN only allowed for all atoms)"
        bad.setdefault(int(s), Problem(why, row))
    flag(np.isinf(batch.energy), "energy is infinite")
    flag(~np.isfinite(batch.cells).reshape(n, 9).all(axis=1), "cell has non-finite entries")
    huge = np.abs(np.nan_to_num(batch.cells.reshape(n, 9))) > MAX_COORDINATE
    flag(huge.any(axis=1), "cell has implausible entries" + far)
    for index, why in batch.implausible_cells().items():  # a singular cell: judged below
        bad.setdefault(index, Problem(why))
    for index, reason in _singular_cells(batch).items():
        bad.setdefault(index, Problem(reason))
    return dict(sorted(bad.items()))


def _singular_cells(batch: StructureBatch) -> dict[int, str]:
    """``{structure: reason}`` for periodic structures whose cell vectors along their
    periodic axes are all zero or not independent; one batched SVD per pbc pattern (at
    most 7), not one per structure. Structures with non-finite cells are left out (their
    own check names them)."""
    found: dict[int, str] = {}
    finite = np.isfinite(batch.cells).all(axis=(1, 2))
    patterns, which = np.unique(batch.pbc, axis=0, return_inverse=True)
    for k, pattern in enumerate(patterns):
        if not pattern.any():
            continue
        rows = np.flatnonzero((which.reshape(-1) == k) & finite)
        vecs = batch.cells[rows][:, pattern]  # (n, n_periodic, 3)
        sv = np.linalg.svd(vecs, compute_uv=False)  # (n, n_periodic), descending
        empty = ~vecs.reshape(len(rows), -1).any(axis=1)
        singular = sv[:, -1] <= 1e-8 * np.maximum(1.0, sv[:, 0])
        for s in rows[empty].tolist():
            found[s] = (
                f"periodic structure (pbc={pattern.tolist()}) has no cell (all zero: an "
                'extxyz frame without Lattice?): give its Lattice, or pbc="F F F"'
            )
        for s in rows[singular & ~empty].tolist():
            found[s] = (
                f"periodic structure (pbc={pattern.tolist()}) has a singular cell "
                f"{batch.cells[s].tolist()}"
            )
    return found
