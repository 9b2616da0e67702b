"""Centre blocks: a large cell's atoms in consecutive ranges of a bounded number of pairs.

Every prediction route that holds per-pair arrays (∂G/∂r_ij) holds them for one block of
centre atoms at a time, :data:`BLOCK_BYTES` of ∂G/∂r at once whatever the cell's size: the
compiled unfused route (:mod:`dparallel.deploy.acsf_forces`) and the torch route of
:meth:`dparallel.deploy.DeployedModel.predict` (through :func:`centre_batches`).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from dparallel.neighbors import Neighbors
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    from collections.abc import Iterator

#: ∂G/∂r bytes a prediction holds at once: its routes compute a cell's centres block by
#: block (:func:`centre_blocks`). Every pair's at once took 15 kB more per atom than the
#: fused route on fcc Cu with 12 functions in the unfused route, and ~45 kB per atom in the
#: torch route (its intermediates are ~3× ∂G/∂r); blocks of this size bring both to the
#: fused route's peak (docs/deploy.md), at no measured cost in CPU time.
BLOCK_BYTES = 16 * 2**20


def centre_blocks(seg: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Consecutive centre ranges ``[a, b)`` covering the n centres of ``seg`` (n + 1,: their
    pair ranges, as a layout's ``segs``), of about ``limit`` pairs each (at most ``limit``
    plus one centre's pairs); one block when all fit."""
    n, total = seg.shape[0] - 1, int(seg[-1])
    if total <= limit or n <= 1:
        return [(0, n)]
    cuts = np.searchsorted(seg, np.arange(max(1, limit), total, max(1, limit)), side="right") - 1
    bounds = np.unique(np.concatenate([[0], cuts, [n]])).tolist()
    return list(itertools.pairwise(bounds))


class CentreBatch(NamedTuple):
    """One block of centres as a batch of its own: the centres and their neighbours."""

    batch: StructureBatch  # the block's atoms, every structure kept (some with 0 atoms)
    neighbors: Neighbors  # the centres' pairs, numbered in ``batch``
    atoms: np.ndarray  # (n_b,) int64, row in the whole batch of each of ``batch``'s atoms
    centre: np.ndarray  # (n_b,) bool, the atom is one of the block's centres


def centre_batches(batch: StructureBatch, nb: Neighbors, limit: int) -> Iterator[CentreBatch]:
    """The centres of ``batch`` (its list ``nb`` in centre order) in blocks of about ``limit``
    pairs (:func:`centre_blocks`), each with its pairs and their neighbour atoms; the whole
    batch as it is when it fits in one block. A descriptor computed on a block's batch
    gives its centres' rows as on the whole batch (a centre's features depend only on its
    pairs and its neighbours' elements)."""
    n = batch.n_atoms
    seg = np.searchsorted(nb.pair_first, np.arange(n + 1))
    for a, b in centre_blocks(seg, limit):
        if a == 0 and b == n:
            yield CentreBatch(batch, nb, np.arange(n), np.ones(n, dtype=bool))
            return
        p, q = int(seg[a]), int(seg[b])
        atoms = np.unique(np.concatenate([np.arange(a, b), nb.pair_second[p:q]]))
        first = np.searchsorted(atoms, nb.pair_first[p:q])
        second = np.searchsorted(atoms, nb.pair_second[p:q])
        pairs = Neighbors(first, second, *(field[p:q] for field in nb[2:]))
        part = StructureBatch(
            numbers=batch.numbers[atoms], positions=batch.positions[atoms], cells=batch.cells,
            pbc=batch.pbc, energy=batch.energy, forces=batch.forces[atoms],
            offsets=np.searchsorted(atoms, batch.offsets), tags=batch.tags,
        )  # fmt: skip
        yield CentreBatch(part, pairs, atoms, (atoms >= a) & (atoms < b))
