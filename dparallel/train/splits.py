"""Which split (train, validation, test) each stored structure belongs to.

A structure's split is a hash of (source index, seed), so it does not depend on the
partitioning; n2p2 ``set=`` tags override it (docs/training.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from dparallel.errors import TrainingError

if TYPE_CHECKING:
    from collections.abc import Callable

    from dparallel.store import Store
    from dparallel.types import StructureBatch

__all__ = ["SPLITS", "SplitIndex", "assign_splits", "build_split_index"]

#: Split codes stored per structure.
SPLITS = {"train": 0, "validation": 1, "test": 2}


def _hash_uniform(ids: np.ndarray, seed: int) -> np.ndarray:
    """Uniform [0, 1) per id from a splitmix64 hash of (id, seed); order-independent."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64(seed % 2**63) * np.uint64(0x9E3779B97F4A7C15)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def assign_splits(
    ids: np.ndarray, tags: np.ndarray, validation: float, test: float, seed: int
) -> np.ndarray:
    """Split code (0 train, 1 validation, 2 test) per structure, (S,) int8.

    A structure's split depends only on its source index and ``seed`` (not on the
    partitioning). "test" tags (n2p2's ``begin set=test``) force test, "train" tags keep
    the structure out of the test split (it may still become validation).
    """
    u = _hash_uniform(ids, seed)
    split = np.where(u < test, 2, np.where(u < test + validation, 1, 0)).astype(np.int8)
    tags = np.asarray(tags, dtype=object)
    is_train = tags == "train"
    split[is_train] = np.where(_hash_uniform(ids, seed + 1)[is_train] < validation, 1, 0)
    split[tags == "test"] = 2
    return split


@dataclass
class SplitIndex:
    """Per done partition: source ids and split code of each stored structure (O(S) ints)."""

    partitions: list[int]
    ids: dict[int, np.ndarray]  # p → (S_p,) int64 source index
    split: dict[int, np.ndarray]  # p → (S_p,) int8
    atoms: dict[int, int] = field(default_factory=dict)  # p → atoms it stores

    def count(self, name: str) -> int:
        """Number of structures in split ``name``."""
        code = SPLITS[name]
        return int(sum(int((s == code).sum()) for s in self.split.values()))

    def partitions_with(self, name: str) -> list[int]:
        """Partitions holding at least one structure of split ``name``."""
        code = SPLITS[name]
        return [p for p in self.partitions if np.any(self.split[p] == code)]

    def ids_of(self, name: str) -> np.ndarray:
        """Sorted source ids of split ``name``."""
        code = SPLITS[name]
        parts = [self.ids[p][self.split[p] == code] for p in self.partitions]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def build_split_index(
    store: Store,
    validation: float,
    test: float,
    seed: int,
    visit: Callable[[int, StructureBatch, np.ndarray], None] | None = None,
) -> SplitIndex:
    """Read structure tags and source indices of every done partition and assign splits.

    ``visit(p, batch, split)`` is called per partition for callers that need a pass over
    the structures anyway (reference energies); only one partition is held at a time.
    """
    parts = [int(p) for p in store.done_partitions()]
    if not parts:
        raise TrainingError(
            f"{store.target}: no partition is done; rerun the {store.made_by} command that made it"
        )
    ids: dict[int, np.ndarray] = {}
    split: dict[int, np.ndarray] = {}
    atoms: dict[int, int] = {}
    for p in parts:  # a store still incomplete stores the source index of its structures too
        batch = store.read_partition(p)
        ids[p] = store.partition_source_indices(p).astype(np.int64)
        split[p] = assign_splits(ids[p], batch.tags, validation, test, seed)
        atoms[p] = batch.n_atoms
        if visit is not None:
            visit(p, batch, split[p])
    return SplitIndex(parts, ids, split, atoms)
