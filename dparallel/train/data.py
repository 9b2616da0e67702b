"""Reading training data from a featurized store: partitions, their cache, batch plans
(each structure's split: :mod:`dparallel.train.splits`).

A partition is read whole (structures + ``features/<descriptor>/<E>`` + per-pair
derivatives) as row tables (:class:`~dparallel.train.batch.PartitionData`) by a
background thread, kept in a byte-bounded LRU cache, and its structures of the requested
split are fed through a bounded shuffle buffer into mini-batches
(:func:`~dparallel.train.batch.assemble`; see docs/training.md).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
from ase.data import atomic_numbers

from dparallel.errors import TrainingError
from dparallel.train.batch import (
    Batch,
    PartitionData,
    Rows,
    assemble,
    make_batch,
    take_structures,
)
from dparallel.train.gather_ops import HOST, HostOps
from dparallel.train.heap import trim_heap
from dparallel.train.read_ahead import background
from dparallel.train.splits import SPLITS, SplitIndex

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator, Sequence

    from dparallel.store import Store

log = logging.getLogger(__name__)


#: Without ``DPARALLEL_TRAIN_CACHE_MB``, decoded partitions may take this share of the
#: host memory available when training starts.
CACHE_SHARE = 0.25


def train_cache_bytes() -> int:
    """Bytes of decoded partitions a training run keeps (``DPARALLEL_TRAIN_CACHE_MB``, or
    :data:`CACHE_SHARE` of the available host memory; 0 reads the store every epoch)."""
    if os.environ.get("DPARALLEL_TRAIN_CACHE_MB", "").strip():
        from dparallel.config import env_number

        return int(env_number("DPARALLEL_TRAIN_CACHE_MB", 0, "MiB") * 2**20)
    import psutil  # only here: not loaded with dparallel.train

    return int(CACHE_SHARE * psutil.virtual_memory().available)


def load_partition(
    store: Store, p: int, descriptor: str, elements: Sequence[str], index: SplitIndex, forces: bool
) -> PartitionData:
    """Read partition ``p`` (structures, features, derivatives if ``forces``) as row tables."""
    batch = store.read_partition(p)
    check_labels(store, p, batch.energy, batch.forces)
    offsets = batch.offsets
    rows = {
        "structures": Rows(np.arange(batch.n_structures + 1), {"energy": batch.energy}),
        "atoms": Rows(offsets, {"forces": batch.forces}),
    }
    nbytes = batch.positions.nbytes * 2
    stored = store.read_features(p, descriptor, derivatives=forces)
    for elem in elements:
        base = f"features/{descriptor}/{elem}"
        arr = stored.get(elem, {})
        if "values" not in arr:
            if np.any(batch.numbers == atomic_numbers[elem]):
                raise TrainingError(
                    f"{store.target}: partition {p} has {elem} atoms but no {base} arrays; "
                    f"featurize the store (descriptor {descriptor!r}; a done partition "
                    "without them was damaged: featurize it again with --overwrite)"
                )
            continue
        atom_index = arr["atom_index"].astype(np.int64)
        _check_rows(store, p, base, {"atom_index": atom_index, "values": arr["values"]},
                    {"atom_index": batch.n_atoms})  # fmt: skip
        check_features(store, p, f"{base}/values", arr["values"])
        order: np.ndarray | None = np.argsort(atom_index, kind="stable")  # rows sorted by atom
        if np.all(order == np.arange(atom_index.shape[0])):
            order = None
        values = arr["values"] if order is None else arr["values"][order]
        atom_index = atom_index if order is None else atom_index[order]
        rows[f"features/{elem}"] = Rows(
            np.searchsorted(atom_index, offsets).astype(np.int64),
            {"values": values, "atom_index": atom_index},
            refs={"atom_index": "atoms"},
        )
        nbytes += values.nbytes
        for neigh in elements if forces else ():
            d = {k.split("/", 2)[2]: v for k, v in arr.items() if k.startswith(f"d/{neigh}/")}
            if not d:
                if values.shape[0] and np.any(batch.numbers == atomic_numbers[neigh]):
                    raise TrainingError(
                        f"{store.target}: partition {p} has no derivatives {base}/d/{neigh}; "
                        "featurize with derivatives=True, or train with force_weight=0"
                    )
                continue
            block = f"{base}/d/{neigh}"
            n_atoms, n_rows = batch.n_atoms, values.shape[0]
            _check_rows(
                store, p, block, {k: d[k] for k in _PAIR_ARRAYS},
                {"pair_first": n_atoms, "pair_second": n_atoms, "center": n_rows},
            )  # fmt: skip
            for name in ("vectors", "dG_dr"):
                check_features(store, p, f"{block}/{name}", d[name])
            first = d["pair_first"].astype(np.int64)
            center = d["center"].astype(np.int64)
            if order is not None:  # rows of the re-sorted values
                center = np.argsort(order)[center]  # the inverse permutation
            pairs = {
                "first": first,
                "second": d["pair_second"].astype(np.int64),
                "center": center,
                "vectors": d["vectors"],
                "dG_dr": d["dG_dr"],
            }
            if np.any(first[1:] < first[:-1]):  # pairs by centre (as stored: no copy)
                po = np.argsort(first, kind="stable")
                pairs = {k: v[po] for k, v in pairs.items()}
            _check_pairs(store, p, block, pairs, batch.structure_index, atom_index)
            rows[f"derivatives/{elem}/{neigh}"] = Rows(
                np.searchsorted(pairs["first"], offsets).astype(np.int64),
                pairs,
                refs={"first": "atoms", "second": "atoms", "center": f"features/{elem}"},
                constant={"feature_index": d["feature_index"].astype(np.int64)},
            )
            nbytes += sum(v.nbytes for v in pairs.values()) + pairs["first"].nbytes
    return PartitionData(p, index.ids[p], index.split[p], rows, nbytes)


def _check_pairs(
    store: Store,
    p: int,
    block: str,
    pairs: dict[str, np.ndarray],
    structure: np.ndarray,
    atom_index: np.ndarray,
) -> None:
    """Raise unless every pair joins atoms of one structure and its center row is its
    first atom's row of values."""
    if np.any(structure[pairs["first"]] != structure[pairs["second"]]):
        raise TrainingError(f"{store.target}: partition {p}: pair crosses structures")
    if np.any(atom_index[pairs["center"]] != pairs["first"]):
        raise TrainingError(
            f"{store.target}: partition {p}: {block}: a pair's center row is not its "
            f"first atom's row of values; the store is damaged: {store.remake}"
        )


#: A derivative block's per-pair arrays (one row per pair each).
_PAIR_ARRAYS = ("pair_first", "pair_second", "center", "vectors", "dG_dr")


def check_labels(store: Store, p: int, energy: np.ndarray, forces: np.ndarray) -> None:
    """Raise for an infinite energy or force: the readers refuse them in structure files,
    so one in a store is damage, and the loss, which leaves out labels that are not finite
    (NaN: absent), would drop it silently."""
    for name, values in (("energy", energy), ("forces", forces)):
        rows = np.flatnonzero(np.isinf(values).any(axis=tuple(range(1, values.ndim))))
        if rows.size:
            raise TrainingError(
                f"{store.target}: partition {p}: structures/{name}: infinite in {rows.size} "
                f"rows (first: row {rows[0]}): the store is damaged or not one dparallel "
                f"wrote; {store.remake}"
            )


def check_features(store: Store, p: int, name: str, values: np.ndarray) -> None:
    """Raise where ``values`` (a feature array of partition ``p``) hold a value that is not
    finite or beyond ``FEATURE_LIMIT``: damage that training met only as "the model
    diverged"."""
    from dparallel.store.stats import FEATURE_LIMIT, out_of_range  # not at import: zarr

    bad = out_of_range(values)
    if bad is None:
        return
    rows = np.flatnonzero(bad.reshape(values.shape[0], -1).any(1))
    raise TrainingError(
        f"{store.target}: partition {p}: {name}: {int(bad.sum())} values not finite or "
        f"beyond ±{FEATURE_LIMIT:.3g} in {rows.size} rows (first: row {rows[0]}): the store "
        f"is damaged; {store.repair}"  # info --verify lists them by the same rule
    )


def _check_rows(
    store: Store, p: int, name: str, columns: dict[str, np.ndarray], bounds: dict[str, int]
) -> None:
    """Raise unless ``columns`` have as many rows each and every index column named in
    ``bounds`` lies in [0, its bound): batch assembly gathers without bounds checks."""
    lengths = {col: int(np.shape(v)[0]) for col, v in columns.items()}
    bad = [
        f"{col} out of [0, {n})" for col, n in bounds.items()
        if columns[col].size and (columns[col].min() < 0 or columns[col].max() >= n)
    ]  # fmt: skip
    if len(set(lengths.values())) > 1 or bad:
        raise TrainingError(
            f"{store.target}: partition {p}: {name}: rows {lengths}"
            + "".join(f"; {b}" for b in bad)
            + f": the store is damaged or not one dparallel wrote; {store.remake}"
        )


class PartitionReader:
    """Reads partitions (with an LRU cache bounded in bytes) for the loaders."""

    #: Whether its partitions may be held on the device (:class:`~dparallel.train.feed.HeldData`).
    holdable: ClassVar[bool] = True

    def __init__(
        self,
        store: Store,
        descriptor: str,
        elements: Sequence[str],
        index: SplitIndex,
        forces: bool,
        cache_bytes: int = 0,
    ) -> None:
        self.store = store
        self.descriptor = descriptor
        self.elements = list(elements)
        self.index = index
        self.forces = forces
        self.cache_bytes = int(cache_bytes)
        self._cache: OrderedDict[int, PartitionData] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, p: int) -> PartitionData:
        """Partition ``p`` from the cache or the store."""
        with self._lock:
            if p in self._cache:
                self._cache.move_to_end(p)
                return self._cache[p]
        data = self.load(p)
        if self.cache_bytes > 0 and data.nbytes <= self.cache_bytes:
            with self._lock:
                self._cache[p] = data
                while sum(d.nbytes for d in self._cache.values()) > self.cache_bytes:
                    self._cache.popitem(last=False)
        return data

    def caches(self, p: int) -> bool:
        """Whether partition ``p`` is in the cache."""
        with self._lock:
            return p in self._cache

    def load(self, p: int) -> PartitionData:
        """Read partition ``p`` from the store (no cache)."""
        with torch.profiler.record_function("dparallel: read a partition"):
            return load_partition(
                self.store, p, self.descriptor, self.elements, self.index, self.forces
            )

    def batch(
        self,
        items: Sequence[tuple[PartitionData, int]],
        dtype: torch.dtype | None = torch.float64,
        ops: HostOps = HOST,
    ) -> Batch:
        """The :class:`Batch` of ``(partition, local structure)`` items, assembled on the host
        with ``ops`` (floating columns in ``dtype``; ``None``: as stored)."""
        with torch.profiler.record_function("dparallel: assemble a batch on the host"):
            return make_batch(assemble(items, ops, dtype), self.elements, dtype)

    def stream(self, order: Sequence[int], prefetch: int) -> Generator[PartitionData, None, None]:
        """Partitions in ``order``; ``prefetch`` > 0 reads ahead in a background thread."""
        parts = (self.get(int(p)) for p in order)
        return background(parts, prefetch, "dparallel-prefetch") if prefetch > 0 else parts


#: A partition the shuffle buffer still draws from is copied down to its structures left
#: once they are at most this share of the structures it holds.
COMPACT_SHARE = 0.5


def _compact(
    reader: PartitionReader,
    loaded: dict[int, PartitionData],
    row: dict[int, np.ndarray],
    pending: dict[int, np.ndarray],
    left: dict[int, int],
) -> None:
    """Copy each loaded partition (but the newest) whose structures left in the shuffle
    buffer are at most :data:`COMPACT_SHARE` of those it holds down to them
    (:func:`~dparallel.train.batch.take_structures`), so a few structures drawn late do
    not keep a whole partition alive; ``row`` maps a partition's structures to the rows of
    its copy. A partition the cache holds is left whole (the copy would add, not free)."""
    for q in list(loaded)[:-1]:
        data = loaded[q]
        if left[q] > COMPACT_SHARE * data.n_structures or reader.caches(q):
            continue
        kept = np.flatnonzero(pending[q])
        loaded[q] = take_structures(data, kept if q not in row else row[q][kept])
        row[q] = np.full(pending[q].shape[0], -1, np.int64)
        row[q][kept] = np.arange(kept.shape[0])
        del data
        trim_heap()


class BatchPlan:
    """Which structures make each mini-batch of a split, from the split index alone.

    ``partitions`` is the order partitions are read in; iterating gives each batch as
    ``(partition, local structure)`` pairs. With ``shuffle`` the partitions come in a
    random order and structures are drawn at random from a buffer of at most
    ``shuffle_buffer`` (+ one partition) structures filled in that order; the plan depends
    only on (seed, epoch), so a resumed run, and data held on a device rather than
    streamed, see the same batches. Every structure of the split is in exactly one batch.
    """

    def __init__(
        self,
        index: SplitIndex,
        split: str,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int = 0,
        epoch: int = 0,
        shuffle_buffer: int = 512,
    ) -> None:
        self.index, self.code = index, SPLITS[split]
        self.batch_size, self.shuffle, self.shuffle_buffer = batch_size, shuffle, shuffle_buffer
        self._rng = np.random.default_rng([seed, epoch, 7919])
        parts = index.partitions_with(split)
        if shuffle:
            parts = [parts[i] for i in self._rng.permutation(len(parts))]
        self.partitions: list[int] = parts

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        rng, size = self._rng, self.batch_size
        buffer: list[tuple[int, int]] = []

        def draw() -> list[tuple[int, int]]:
            picked = []
            for _ in range(min(size, len(buffer))):
                i = int(rng.integers(len(buffer)))
                picked.append(buffer[i])
                buffer[i] = buffer[-1]
                buffer.pop()
            return picked

        for p in self.partitions:
            local = np.flatnonzero(self.index.split[p] == self.code)
            if self.shuffle:
                buffer.extend((p, int(s)) for s in local)
                while len(buffer) >= max(self.shuffle_buffer, size):
                    yield draw()
            else:
                for a in range(0, local.shape[0], size):
                    yield [(p, int(s)) for s in local[a : a + size]]
        while buffer:
            yield draw()


def iterate_batches(
    reader: PartitionReader,
    plan: BatchPlan,
    *,
    prefetch: int = 1,
    dtype: torch.dtype | None = torch.float64,
    ops: HostOps = HOST,
) -> Iterator[Batch]:
    """The mini-batches of ``plan`` (every structure of its split exactly once), streamed
    from the store and assembled with ``ops``.

    Partitions are read in the plan's order (``prefetch`` ahead in a thread) and dropped
    once their last structure is batched; a batch is not referenced here once yielded.
    The end of the iteration closes ``ops`` (its gather threads).
    """
    pending = {p: reader.index.split[p] == plan.code for p in plan.partitions}  # not batched
    left = {p: int(np.count_nonzero(pending[p])) for p in plan.partitions}
    stream = reader.stream(plan.partitions, prefetch)
    loaded: dict[int, PartitionData] = {}
    row: dict[int, np.ndarray] = {}  # p → its structures' rows in a compacted loaded[p]
    try:
        for items in plan:
            for p, _ in items:
                while p not in loaded:
                    part = next(stream)
                    loaded[part.p] = part
                    del part  # a partition is dropped with its last structure batched
                    if reader.holdable:
                        _compact(reader, loaded, row, pending, left)
            at = [(loaded[p], s if p not in row else int(row[p][s])) for p, s in items]
            batch = reader.batch(at, dtype, ops)
            del at
            for p, s in items:
                pending[p][s] = False
                left[p] -= 1
                if left[p] == 0:
                    del loaded[p]
                    row.pop(p, None)
                    if not reader.caches(p):
                        trim_heap()  # its blocks back to the system, not kept by malloc
            yield batch
            del batch  # not held while the next one is assembled
    finally:
        stream.close()
        ops.close()
