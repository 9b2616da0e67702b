"""Atoms at one place: two atoms (or an atom and a periodic image of it) closer than any
potential can take, where every descriptor derivative divides by their distance."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.errors import DescriptorError

if TYPE_CHECKING:
    from dparallel.types import StructureBatch

__all__ = ["COINCIDENT_DISTANCE", "coincident_atoms", "refuse_coincident"]

#: Atoms closer than this (Å) count as being at the same position.
COINCIDENT_DISTANCE = 1e-4


def coincident_atoms(
    batch: StructureBatch, pair_first: np.ndarray, pair_second: np.ndarray, distances: Any
) -> dict[int, str]:
    """``{structure in batch: which atoms are at one place}`` for the pairs given (a
    :class:`~dparallel.neighbors.Neighbors`' fields; ``distances`` numpy or torch);
    vectorised, a loop only over the pairs that are."""
    out: dict[int, str] = {}
    distances = np.asarray(distances.detach() if hasattr(distances, "detach") else distances)
    for r in np.flatnonzero(distances < COINCIDENT_DISTANCE):
        s = int(batch.structure_index[pair_first[r]])
        if s in out:
            continue
        i, j = int(pair_first[r] - batch.offsets[s]), int(pair_second[r] - batch.offsets[s])
        what = f"atoms {min(i, j)} and {max(i, j)}" if i != j else f"atom {i} and its image"
        out[s] = (
            f"{what} are at the same position (distance {float(distances[r]):.3g} Å < "
            f"{COINCIDENT_DISTANCE:g} Å)"
        )
    return out


def refuse_coincident(
    batch: StructureBatch, pair_first: np.ndarray, pair_second: np.ndarray, distances: Any
) -> None:
    """Raise :class:`DescriptorError` naming the first structure with atoms at one place."""
    found = coincident_atoms(batch, pair_first, pair_second, distances)
    if found:
        s = min(found)
        raise DescriptorError(f"structure {s}: {found[s]}; a descriptor of it is not defined")
