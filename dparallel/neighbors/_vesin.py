"""Full neighbor lists for a :class:`~dparallel.types.StructureBatch` (vesin cell lists)."""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from dparallel.errors import DescriptorError

if TYPE_CHECKING:
    from types import ModuleType

    from dparallel.types import StructureBatch

__all__ = ["Neighbors", "import_vesin", "neighbor_list"]


_IMPORT_LOCK = threading.Lock()


def import_vesin() -> ModuleType:
    """The vesin module, imported without torch when torch is not loaded yet.

    vesin imports torch (~1.5 s) only to accept torch tensors; dparallel gives it numpy
    arrays, and a featurize worker computing ACSF through the compiled kernel needs no
    torch at all. While vesin loads, ``sys.modules["torch"] = None`` makes its
    ``import torch`` fail (it then skips its torch support); torch imports normally after.
    """
    if "vesin" in sys.modules:
        return sys.modules["vesin"]
    with _IMPORT_LOCK:
        if "torch" in sys.modules:
            import vesin

            return vesin
        sys.modules["torch"] = None  # type: ignore[assignment]
        try:
            import vesin
        finally:
            del sys.modules["torch"]
    return vesin


class Neighbors(NamedTuple):
    """A full pair list over a batch; numpy arrays, sorted by ``pair_first`` (stable).

    ``P`` is the number of pairs. Each unordered pair appears twice (i→j and j→i);
    in cells smaller than the cutoff the same (i, j) appears once per image shift and
    an atom may neighbour its own images (i == j, shift ≠ 0).
    """

    pair_first: np.ndarray  # (P,) int64, centre atom i, global row of the batch
    pair_second: np.ndarray  # (P,) int64, neighbour atom j, global row of the batch
    shifts: np.ndarray  # (P, 3) int64, image shift S (in cell vectors)
    vectors: np.ndarray  # (P, 3) float64, Å, r_ij = r_j − r_i + S·cell
    distances: np.ndarray  # (P,) float64, Å, |r_ij|

    @property
    def n_pairs(self) -> int:
        """Number of pairs ``P``."""
        return int(self.pair_first.shape[0])


def _empty() -> Neighbors:
    return Neighbors(
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros((0, 3), np.int64),
        np.zeros((0, 3)),
        np.zeros(0),
    )


#: Non-periodic structures with at most this many atoms use the vectorised all-pairs path
#: (one numpy pass for all of them; vesin's per-call overhead dominates for molecules).
_SMALL = 48


def _small_molecules(
    batch: StructureBatch, structures: np.ndarray, cutoff: float
) -> tuple[np.ndarray, ...]:
    """All pairs (i ≠ j, |r_ij| < cutoff) of the given non-periodic structures at once."""
    n_s = batch.atom_counts[structures]  # (S',)
    atoms = np.concatenate(
        [np.arange(batch.offsets[s], batch.offsets[s + 1]) for s in structures.tolist()]
    )  # (N',) global rows, grouped by structure
    n_of_atom = np.repeat(n_s, n_s)  # (N',) size of the atom's structure
    start_of_atom = np.repeat(batch.offsets[structures], n_s)  # (N',) its first row
    i = np.repeat(atoms, n_of_atom)  # (Σ n²,)
    block = np.cumsum(n_of_atom) - n_of_atom  # first candidate of each atom
    j = np.repeat(start_of_atom, n_of_atom) + (np.arange(i.shape[0]) - np.repeat(block, n_of_atom))
    vec = batch.positions[j] - batch.positions[i]  # (Σ n², 3)
    dist = np.sqrt(np.einsum("pa,pa->p", vec, vec))
    keep = (i != j) & (dist < cutoff)
    return i[keep], j[keep], np.zeros((int(keep.sum()), 3), np.int64), vec[keep], dist[keep]


def neighbor_list(batch: StructureBatch, cutoff: float) -> Neighbors:
    """Full neighbor list of every structure in ``batch`` within ``cutoff`` (Å).

    Parameters
    ----------
    batch
        Structures; a cell of zeros (or ``pbc`` all False) means non-periodic. Mixed
        ``pbc`` and triclinic cells are supported, also cells smaller than ``cutoff``.
    cutoff
        Pairs with ``0 < |r_ij| < cutoff`` are returned.

    Returns
    -------
    Neighbors
        numpy arrays; indices are global rows of ``batch``; sorted by ``pair_first``.
    """
    vesin = import_vesin()
    if not np.isfinite(cutoff) or cutoff <= 0:
        raise DescriptorError(f"neighbor_list: cutoff must be a positive number, got {cutoff!r}")
    parts: list[tuple[np.ndarray, ...]] = []
    counts = batch.atom_counts
    small = ~batch.pbc.any(axis=1) & (counts <= _SMALL)
    if small.any():
        parts.append(_small_molecules(batch, np.nonzero(small)[0], cutoff))
    # sorted by (i, j): the batch's pairs are then in order already (no argsort and gather
    # of every array); one thread: a worker has one core (vesin's default took longer)
    nl = vesin.NeighborList(cutoff=float(cutoff), full_list=True, sorted=True, n_threads=1)
    for s in np.nonzero(~small)[0].tolist():
        a, b = int(batch.offsets[s]), int(batch.offsets[s + 1])
        if b - a == 0:
            continue
        positions = batch.positions[a:b]
        cell = batch.cells[s]
        pbc = batch.pbc[s].copy()
        if np.any(pbc):
            volume = abs(np.linalg.det(cell))
            if not np.isfinite(volume) or volume < 1e-10:
                raise DescriptorError(
                    f"structure {s}: periodic along {pbc.tolist()} but the cell is singular "
                    f"(|det| = {volume:.3g}); give three independent cell vectors or pbc=False"
                )
        box = cell if np.any(pbc) else np.zeros((3, 3))
        i, j, shifts, vec, dist = nl.compute(
            points=positions, box=box, periodic=pbc, quantities="ijSDd", copy=True
        )
        i = i.astype(np.int64) + a
        j = j.astype(np.int64) + a
        parts.append((i, j, shifts.astype(np.int64), vec, dist))
    if not parts:
        return _empty()
    first = np.concatenate([p[0] for p in parts])
    nb = Neighbors(
        pair_first=first,
        pair_second=np.concatenate([p[1] for p in parts]),
        shifts=np.concatenate([p[2] for p in parts]).reshape(-1, 3),
        vectors=np.concatenate([p[3] for p in parts]).reshape(-1, 3),
        distances=np.concatenate([p[4] for p in parts]),
    )
    if first.shape[0] < 2 or bool((first[1:] >= first[:-1]).all()):
        return nb  # each part is sorted, and so is their sequence (no molecules in between)
    order = np.argsort(first, kind="stable")
    return Neighbors(*(field[order] for field in nb))
