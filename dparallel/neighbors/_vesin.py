"""Full neighbor lists for a :class:`~dparallel.types.StructureBatch`: small structures all
at once (:mod:`dparallel.neighbors._small_cells`, compiled by numba), large ones, and all of
them when numba does not import, through vesin's cell lists."""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from dparallel.errors import DescriptorError
from dparallel.kernels._backends.availability import numba_available
from dparallel.neighbors._small_cells import SMALL_CELL_ATOMS, small_cell_pairs

if TYPE_CHECKING:
    from types import ModuleType

    from dparallel.types import StructureBatch

__all__ = ["Neighbors", "import_vesin", "in_centre_order", "neighbor_list", "select_structures"]


_IMPORT_LOCK = threading.Lock()


def import_vesin() -> ModuleType:
    """The vesin module, imported without torch when torch is not loaded yet.

    vesin imports torch (slow: docs/kernels.md) only to accept torch tensors; dparallel gives
    it numpy arrays, and a featurize worker computing ACSF through the compiled kernel needs no
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


def in_centre_order(neighbors: Neighbors) -> Neighbors:
    """``neighbors`` with its pairs sorted by ``pair_first`` (stable), as every kernel reads
    them (one contiguous run per centre); a list already in order is returned as it is."""
    first = np.asarray(neighbors.pair_first)
    if first.size < 2 or bool(np.all(first[1:] >= first[:-1])):
        return neighbors
    order = np.argsort(first, kind="stable")
    return Neighbors(*(np.asarray(field)[order] for field in neighbors))


def select_structures(
    neighbors: Neighbors, offsets: np.ndarray, start: int, stop: int
) -> Neighbors:
    """The pairs of structures ``[start, stop)`` of a list in centre order over a batch with
    atom ``offsets`` (S + 1,), numbered as in ``batch.select(start, stop)`` (views)."""
    a, b = int(offsets[start]), int(offsets[stop])
    p, q = np.searchsorted(neighbors.pair_first, [a, b]).tolist()
    first, second, shifts, vectors, distances = (field[p:q] for field in neighbors)
    return Neighbors(first - a, second - a, shifts, vectors, distances)


def _empty() -> Neighbors:
    none = np.zeros(0, np.int64)
    return Neighbors(none, none.copy(), np.zeros((0, 3), np.int64), np.zeros((0, 3)), np.zeros(0))


def _cells_for_lists(batch: StructureBatch) -> np.ndarray:
    """The batch's cells, each able to serve a cell list: where a structure is periodic
    along some axes, its periodic vectors must be independent (else a DescriptorError
    naming it); a vector along a non-periodic axis that leaves the cell singular (a slab's
    zero ``c``, as ``ase.build.fcc111(vacuum=None)`` makes) is replaced by a unit vector
    normal to the periodic ones: no image lies along it, so no pair depends on it."""
    cells = batch.cells
    periodic = np.flatnonzero(batch.pbc.any(axis=1))
    if periodic.size == 0:
        return cells
    implausible = batch.implausible_cells()
    if implausible:
        s, why = next(iter(implausible.items()))
        raise DescriptorError(f"structure {s}: {why}")
    volume = np.abs(np.linalg.det(cells[periodic]))
    singular = periodic[~np.isfinite(volume) | (volume < 1e-10)]
    if singular.size == 0:
        return cells
    cells = cells.copy()
    for s in singular.tolist():  # only degenerate cells, a handful of structures
        axes = batch.pbc[s]
        spanned = cells[s][axes]
        independent = not axes.all() and bool(np.all(np.isfinite(spanned)))
        if independent:
            _, sigma, vt = np.linalg.svd(spanned)
            independent = float(sigma.min()) > 1e-5
        if not independent:
            raise DescriptorError(
                f"structure {s}: periodic along {axes.tolist()} but the cell is singular "
                f"(|det| = {np.abs(np.linalg.det(batch.cells[s])):.3g}); give independent "
                "periodic cell vectors or pbc=False"
            )
        cells[s][~axes] = vt[int(axes.sum()) :]  # orthonormal complement of the span
    return cells


def _vesin_pairs(
    batch: StructureBatch, cells: np.ndarray, structures: np.ndarray, cutoff: float
) -> list[tuple[np.ndarray, ...]]:
    """vesin's cell lists for the given (large) structures, one call each."""
    vesin = import_vesin()
    # sorted by (i, j): the batch's pairs are then in order already (no argsort and gather
    # of every array); one thread: a worker has one core (vesin's default took longer)
    nl = vesin.NeighborList(cutoff=float(cutoff), full_list=True, sorted=True, n_threads=1)
    parts: list[tuple[np.ndarray, ...]] = []
    for s in structures.tolist():
        a, b = int(batch.offsets[s]), int(batch.offsets[s + 1])
        pbc = batch.pbc[s].copy()
        box = cells[s] if np.any(pbc) else np.zeros((3, 3))
        # copy=False: i, j and S are views of vesin's buffers (the next compute overwrites
        # them), each read once into our int64 arrays here; D and d are numpy's own already
        # (vesin's float conversion), which copy=True copied once more: 60 bytes a pair less
        found = nl.compute(
            points=batch.positions[a:b], box=box, periodic=pbc, quantities="ijSDd", copy=False
        )
        i, j = (np.add(x, a, dtype=np.int64, casting="unsafe") for x in found[:2])
        part = (i, j, found[2].astype(np.int64), found[3], found[4])
        del found, i, j  # vesin's views: nothing of its buffers outlives the next compute
        dist = part[4]
        within = dist < cutoff  # vesin keeps r² < rc², whose |r| may round to rc
        parts.append(part if within.all() else tuple(x[within] for x in part))
    return parts


def _refuse_non_finite_positions(batch: StructureBatch) -> None:
    """Raise :class:`DescriptorError` naming the first atom with a NaN or infinite
    coordinate: it would have no neighbours (and be none), so its features would be an
    isolated atom's and its neighbours' would miss it, unnoticed."""
    finite = np.isfinite(batch.positions).all(axis=1)  # (N,)
    if finite.all():
        return
    row = int(np.flatnonzero(~finite)[0])
    s = int(batch.structure_index[row])
    raise DescriptorError(
        f"structure {s}: atom {row - int(batch.offsets[s])} is at "
        f"{batch.positions[row].tolist()}, not a finite position; give every atom finite "
        "coordinates"
    )


def neighbor_list(batch: StructureBatch, cutoff: float) -> Neighbors:
    """Full neighbor list, pairs with ``|r_ij| < cutoff`` (Å; 0 for two atoms at one
    place, never an atom with itself), of every structure in ``batch``: global rows, sorted
    by ``pair_first``. ``pbc`` all False is non-periodic whatever the cell (a zero cell
    with ``pbc`` True is singular: refused); mixed ``pbc``, triclinic cells and cells
    smaller than ``cutoff`` work. An atom without a finite position is refused, naming it."""
    if not np.isfinite(cutoff) or cutoff <= 0:
        raise DescriptorError(f"neighbor_list: cutoff must be a positive number, got {cutoff!r}")
    _refuse_non_finite_positions(batch)
    cells = _cells_for_lists(batch)
    parts: list[tuple[np.ndarray, ...]] = []
    counts = batch.atom_counts
    small = counts <= SMALL_CELL_ATOMS
    if small.any() and not numba_available():
        small[:] = False  # vesin gives the same pairs (tests/neighbors), only slower
    if small.any():
        rows = np.nonzero(small)[0]
        parts.append(
            small_cell_pairs(batch.positions, batch.offsets, cells, batch.pbc, rows, cutoff)
        )
    if not small.all():
        parts += _vesin_pairs(batch, cells, np.nonzero(~small)[0], cutoff)
    if not parts:
        return _empty()
    if len(parts) == 1:
        return Neighbors(*parts[0])  # sorted by i already
    # each part is sorted; their sequence too unless small and large structures interleave.
    # Field by field, each field's parts let go once joined: the list's bytes and one
    # field's more at once, not twice the list's
    fields = [list(f) for f in zip(*parts, strict=True)]
    parts.clear()
    joined = []
    for f in fields:
        joined.append(np.concatenate(f))
        f.clear()
    return in_centre_order(Neighbors(*joined))
