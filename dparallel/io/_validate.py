"""Shared checks that every reader applies to each structure it returns."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dparallel.types import StructureBatch

__all__ = ["validate_batch"]

#: Largest atomic number accepted (ASE knows elements up to 118).
MAX_Z = 118

#: Largest plausible coordinate or cell entry, in the file's length unit (Å or Bohr): far
#: beyond any atomistic structure, and where a float32 position still resolves ~0.01
#: (docs/io.md). A larger value is a unit or format mistake (e.g. 1e30), never data.
MAX_COORDINATE = 1e5


def validate_batch(batch: StructureBatch) -> dict[int, str]:
    """Check each structure of ``batch``; return ``{local index: reason}`` for invalid ones.

    Checks: at least one atom, atomic numbers in 1..118, finite positions, cells and
    energies (NaN energy means absent), positions and cell entries within
    ±:data:`MAX_COORDINATE`, forces either finite or all NaN (absent),
    and linearly independent cell vectors along every periodic direction.
    Vectorised over atoms; loops only over the (rare) bad structures.
    """
    n = batch.n_structures
    if n == 0:
        return {}
    counts = batch.atom_counts  # (S,)
    sidx = batch.structure_index  # (N,)
    bad: dict[int, str] = {}

    def first_bad_atom(flags: np.ndarray) -> dict[int, int]:
        rows = np.flatnonzero(flags)
        out: dict[int, int] = {}
        for r in rows[np.unique(sidx[rows], return_index=True)[1]]:
            out[int(sidx[r])] = int(r - batch.offsets[sidx[r]])
        return out

    for empty in np.flatnonzero(counts == 0):
        bad.setdefault(int(empty), "structure has no atoms")
    for si, a in first_bad_atom((batch.numbers < 1) | (batch.numbers > MAX_Z)).items():
        bad.setdefault(
            si, f"atom {a}: unknown element (atomic number {batch.numbers[batch.offsets[si] + a]})"
        )
    for si, a in first_bad_atom(~np.isfinite(batch.positions).all(axis=1)).items():
        bad.setdefault(
            si,
            f"atom {a}: non-finite coordinates {batch.positions[batch.offsets[si] + a].tolist()}",
        )
    far = np.isfinite(batch.positions) & (np.abs(batch.positions) > MAX_COORDINATE)
    for si, a in first_bad_atom(far.any(axis=1)).items():
        bad.setdefault(
            si,
            f"atom {a}: implausible coordinates {batch.positions[batch.offsets[si] + a].tolist()}"
            f" (beyond ±{MAX_COORDINATE:g}; see docs/io.md)",
        )
    finite_f = np.isfinite(batch.forces).all(axis=1)  # (N,)
    nan_f = np.isnan(batch.forces).all(axis=1)  # (N,)
    n_finite = np.bincount(sidx, weights=finite_f, minlength=n)
    n_nan = np.bincount(sidx, weights=nan_f, minlength=n)
    for s in np.flatnonzero((n_finite != counts) & (n_nan != counts)):
        row = np.flatnonzero(~finite_f[batch.offsets[s] : batch.offsets[s + 1]])[0]
        bad.setdefault(int(s), f"atom {row}: non-finite forces (NaN only allowed for all atoms)")
    for s in np.flatnonzero(np.isinf(batch.energy)):
        bad.setdefault(int(s), "energy is infinite")
    for s in np.flatnonzero(~np.isfinite(batch.cells).reshape(n, 9).all(axis=1)):
        bad.setdefault(int(s), "cell has non-finite entries")
    huge = np.abs(np.nan_to_num(batch.cells.reshape(n, 9))) > MAX_COORDINATE
    for s in np.flatnonzero(huge.any(axis=1)):
        bad.setdefault(
            int(s), f"cell has implausible entries (beyond ±{MAX_COORDINATE:g}; see docs/io.md)"
        )
    periodic = np.flatnonzero(batch.pbc.any(axis=1))
    for s in periodic:
        if int(s) in bad:
            continue
        vecs = batch.cells[s][batch.pbc[s]]  # (n_periodic, 3)
        sv = np.linalg.svd(vecs, compute_uv=False)
        if sv[-1] <= 1e-8 * max(1.0, float(sv[0])):
            bad[int(s)] = (
                f"periodic structure (pbc={batch.pbc[s].tolist()}) has a singular cell "
                f"{batch.cells[s].tolist()}"
            )
    return dict(sorted(bad.items()))
