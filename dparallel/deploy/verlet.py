"""A neighbour list with a skin for MD: rebuilt only when an atom may have crossed the cutoff.

Built with cutoff r_c + skin; while every atom has moved less than skin/2 since the build
(and cell, pbc and atomic numbers are unchanged), no pair outside r_c + skin can have come
closer than r_c, so the kept pairs (with their image shifts) are complete: only their
vectors and distances are recomputed from the current positions. Descriptors ignore the
pairs beyond their own cutoff, so results equal a fresh list's (tested).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from dparallel.deploy.identical import identical
from dparallel.errors import DescriptorError
from dparallel.kernels.pair_vectors import pair_vectors
from dparallel.neighbors import Neighbors, neighbor_list

if TYPE_CHECKING:
    from dparallel.types import StructureBatch


class VerletStatistics(NamedTuple):
    """How a :class:`VerletList` has been used: builds against calls of ``neighbors``."""

    builds: int  # lists built (cutoff + skin), the first one included
    calls: int  # calls of VerletList.neighbors


class VerletList:
    """Full neighbour list of one structure, reused while no atom moved more than skin/2.

    ``cutoff``: the interaction cutoff r_c (Å); ``skin``: the extra distance (Å) kept in the
    list (0 rebuilds on every call).
    """

    def __init__(self, cutoff: float, skin: float = 0.5) -> None:
        if not cutoff > 0 or not skin >= 0:
            raise DescriptorError(f"need cutoff > 0 and skin >= 0, got {cutoff}, {skin}")
        self.cutoff, self.skin = float(cutoff), float(skin)
        self._builds = self._calls = 0
        self._ref: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._pairs: Neighbors | None = None
        self._shift_vectors = np.zeros((0, 3))  # (P, 3) S·cell, Å

    @property
    def statistics(self) -> VerletStatistics:
        """Builds and calls so far (what a benchmark reports as the list's reuse)."""
        return VerletStatistics(self._builds, self._calls)

    def neighbors(self, batch: StructureBatch) -> Neighbors:
        """Pairs within cutoff + skin of the single structure in ``batch``, current vectors."""
        if batch.n_structures != 1:
            raise DescriptorError(f"VerletList holds one structure, got {batch.n_structures}")
        self._calls += 1
        if self._changed(batch):
            self._build(batch)
        out = self._vectors(batch)  # None: an atom moved more than skin/2 since the build
        if out is None:
            self._build(batch)
            out = self._vectors(batch)
            assert out is not None
        assert self._pairs is not None
        return self._pairs._replace(vectors=out[0], distances=out[1])  # (P, 3), (P,) Å

    def _vectors(self, batch: StructureBatch) -> tuple[np.ndarray, np.ndarray] | None:
        """The kept pairs' vectors and distances, or None if the list must be rebuilt."""
        assert self._pairs is not None and self._ref is not None
        return pair_vectors(
            batch.positions, self._pairs.pair_first, self._pairs.pair_second,
            self._shift_vectors, self._ref[0], self.skin / 2,
        )  # fmt: skip

    def _changed(self, batch: StructureBatch) -> bool:
        """Whether the list must be rebuilt for ``batch`` whatever the atoms' moves."""
        if self._ref is None:
            return True
        pos, cell, pbc, numbers = self._ref
        return pos.shape != batch.positions.shape or not (
            identical(cell, batch.cells[0])
            and identical(pbc, batch.pbc[0])
            and identical(numbers, batch.numbers)
        )

    def _build(self, batch: StructureBatch) -> None:
        """A fresh list with cutoff + skin; remember the state it was built for."""
        self._pairs = neighbor_list(batch, self.cutoff + self.skin)
        self._shift_vectors = self._pairs.shifts @ batch.cells[0]  # (P, 3)
        self._ref = (
            batch.positions.copy(),
            batch.cells[0].copy(),
            batch.pbc[0].copy(),
            batch.numbers.copy(),
        )
        self._builds += 1
