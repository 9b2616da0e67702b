"""Streaming training data from a featurized store: splits, partition reads, mini-batches.

A partition is read whole (structures + ``features/<descriptor>/<E>`` + per-pair
derivatives) by a background thread, kept in a byte-bounded LRU cache, and its structures
of the requested split are fed through a bounded shuffle buffer into mini-batches whose
atoms, feature rows and pairs are re-indexed from 0 (see docs/training.md).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dparallel.descriptors import DescriptorResult, PairDerivatives
from dparallel.errors import TrainingError

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator, Sequence

    from dparallel.store import Store
    from dparallel.types import StructureBatch

__all__ = [
    "SPLITS",
    "Batch",
    "BatchPlan",
    "PartitionData",
    "PartitionReader",
    "SplitIndex",
    "build_split_index",
    "collate",
    "gather_features",
    "iterate_batches",
]

log = logging.getLogger(__name__)

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
    partitioning). n2p2 ``set=test`` tags force test, ``set=train`` tags keep the structure
    out of the test split (it may still become validation).
    """
    u = _hash_uniform(ids, seed)
    split = np.where(u < test, 2, np.where(u < test + validation, 1, 0)).astype(np.int8)
    tags = np.asarray(tags, dtype=object)
    is_test = tags == "test"
    is_train = tags == "train"
    v = _hash_uniform(ids, seed + 1)
    split[is_train] = np.where(v[is_train] < validation, 1, 0)
    split[is_test] = 2
    return split


@dataclass
class SplitIndex:
    """Per done partition: source ids and split code of each stored structure (O(S) ints)."""

    partitions: list[int]
    ids: dict[int, np.ndarray]  # p → (S_p,) int64 source index
    split: dict[int, np.ndarray]  # p → (S_p,) int8

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
        raise TrainingError(f"{store.path}: no partition is done; featurize the store first")
    ids: dict[int, np.ndarray] = {}
    split: dict[int, np.ndarray] = {}
    start = 0
    # stored structures are numbered over done partitions in partition order
    for p in parts:
        batch = store.read_partition(p)
        n = batch.n_structures
        ids[p] = store.source_indices(start, start + n) if store.is_complete else _local_ids(p, n)
        split[p] = assign_splits(ids[p], batch.tags, validation, test, seed)
        start += n
        if visit is not None:
            visit(p, batch, split[p])
    return SplitIndex(parts, ids, split)


def _local_ids(p: int, n: int) -> np.ndarray:
    """Ids for an incomplete store (source indices need a complete one): p·2³² + s."""
    return (np.int64(p) << np.int64(32)) + np.arange(n, dtype=np.int64)


# ----------------------------------------------------------------- partitions
@dataclass
class _PairArrays:
    first: np.ndarray  # (P,) int64 local atom row of centre
    second: np.ndarray  # (P,) int64 local atom row of neighbour
    center: np.ndarray  # (P,) int64 row in the element's values
    vectors: np.ndarray  # (P, 3) Å
    feature_index: np.ndarray  # (F_ef,) int64
    dG_dr: np.ndarray  # (P, F_ef, 3)
    offsets: np.ndarray  # (S + 1,) pair rows of each structure


@dataclass
class _ElementArrays:
    values: np.ndarray  # (n_e, F_e)
    atom_index: np.ndarray  # (n_e,) local atom row
    offsets: np.ndarray  # (S + 1,) value rows of each structure
    pairs: dict[str, _PairArrays] = field(default_factory=dict)


@dataclass(eq=False)
class PartitionData:
    """One partition in memory: labels, features and derivatives (numpy)."""

    p: int
    offsets: np.ndarray  # (S + 1,)
    energy: np.ndarray  # (S,) eV
    forces: np.ndarray  # (N, 3) eV/Å
    ids: np.ndarray  # (S,) source index
    split: np.ndarray  # (S,) int8
    elements: dict[str, _ElementArrays]
    nbytes: int = 0

    @property
    def n_structures(self) -> int:
        """Number of structures in the partition."""
        return int(self.offsets.shape[0] - 1)


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Concatenation of arange(a, b) for each (a, b), vectorised, int64."""
    lengths = (stops - starts).astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    before = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.repeat(starts - before, lengths) + np.arange(total, dtype=np.int64)


def load_partition(
    store: Store, p: int, descriptor: str, elements: Sequence[str], index: SplitIndex, forces: bool
) -> PartitionData:
    """Read partition ``p`` (structures, features, derivatives if ``forces``)."""
    batch = store.read_partition(p)
    offsets = batch.offsets
    atom_struct = batch.structure_index  # (N,)
    out: dict[str, _ElementArrays] = {}
    nbytes = batch.positions.nbytes * 2
    stored = store.read_features(p, descriptor, derivatives=forces)
    for e in elements:
        base = f"features/{descriptor}/{e}"
        arr = stored.get(e, {})
        if "values" not in arr:
            if np.any(batch.numbers == _z(e)):
                raise TrainingError(
                    f"{store.path}: partition {p} has {e} atoms but no {base} arrays; "
                    f"featurize the store (descriptor {descriptor!r})"
                )
            continue
        atom_index = arr["atom_index"].astype(np.int64)
        order = np.argsort(atom_index, kind="stable")
        if np.any(order != np.arange(order.shape[0])):  # keep rows sorted by atom
            inverse = np.empty_like(order)
            inverse[order] = np.arange(order.shape[0])
        else:
            inverse = None
        values = arr["values"][order] if inverse is not None else arr["values"]
        atom_index = atom_index[order]
        ea = _ElementArrays(
            values=values,
            atom_index=atom_index,
            offsets=np.searchsorted(atom_index, offsets).astype(np.int64),
        )
        nbytes += values.nbytes
        if forces:
            for f in elements:
                d = {
                    name.split("/", 2)[2]: value
                    for name, value in arr.items()
                    if name.startswith(f"d/{f}/")
                }
                if not d:
                    if ea.values.shape[0] and np.any(batch.numbers == _z(f)):
                        raise TrainingError(
                            f"{store.path}: partition {p} has no derivatives {base}/d/{f}; "
                            "featurize with derivatives=True, or train with force_weight=0"
                        )
                    continue
                first = d["pair_first"].astype(np.int64)
                po = np.argsort(first, kind="stable")
                center = d["center"].astype(np.int64)
                if inverse is not None:
                    center = inverse[center]
                pa = _PairArrays(
                    first=first[po],
                    second=d["pair_second"].astype(np.int64)[po],
                    center=center[po],
                    vectors=d["vectors"][po],
                    feature_index=d["feature_index"].astype(np.int64),
                    dG_dr=d["dG_dr"][po],
                    offsets=np.searchsorted(first[po], offsets).astype(np.int64),
                )
                if pa.first.shape[0] and np.any(atom_struct[pa.first] != atom_struct[pa.second]):
                    raise TrainingError(f"{store.path}: partition {p}: pair crosses structures")
                ea.pairs[f] = pa
                nbytes += pa.dG_dr.nbytes + pa.vectors.nbytes + 4 * pa.first.nbytes
        out[e] = ea
    return PartitionData(
        p=p,
        offsets=offsets,
        energy=batch.energy,
        forces=batch.forces,
        ids=index.ids[p],
        split=index.split[p],
        elements=out,
        nbytes=nbytes,
    )


def _z(symbol: str) -> int:
    from ase.data import atomic_numbers

    return int(atomic_numbers[symbol])


class PartitionReader:
    """Reads partitions (with an LRU cache bounded in bytes) for the loaders."""

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

    def load(self, p: int) -> PartitionData:
        """Read partition ``p`` from the store (no cache)."""
        return load_partition(
            self.store, p, self.descriptor, self.elements, self.index, self.forces
        )

    def collate(
        self, items: Sequence[tuple[PartitionData, int]], dtype: torch.dtype = torch.float64
    ) -> Batch:
        """A mini-batch of ``(partition, local structure)`` items (:func:`collate`)."""
        return collate(items, self.elements, dtype)

    def stream(self, order: Sequence[int], prefetch: int) -> Generator[PartitionData, None, None]:
        """Partitions in ``order``; ``prefetch`` > 0 reads ahead in a background thread."""
        if prefetch <= 0:
            for p in order:
                yield self.get(int(p))
            return
        q: queue.Queue = queue.Queue(maxsize=prefetch)
        stop = threading.Event()

        def work() -> None:
            try:
                for p in order:
                    item = self.get(int(p))
                    while not stop.is_set():
                        try:
                            q.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
                q.put(None)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
                q.put(exc)

        thread = threading.Thread(target=work, name="dparallel-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                item = q.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join(timeout=10)


# ----------------------------------------------------------------- mini-batches
@dataclass
class Batch:
    """A mini-batch of structures with atoms, feature rows and pairs numbered from 0."""

    ids: np.ndarray  # (S,) source index
    atom_counts: torch.Tensor  # (S,) float
    structure_index: torch.Tensor  # (N,) int64
    energy: torch.Tensor  # (S,) eV, NaN if absent
    forces: torch.Tensor  # (N, 3) eV/Å, NaN if absent
    features: dict[str, DescriptorResult]  # element → values (n_e, F_e), atom_index, pairs

    @property
    def n_structures(self) -> int:
        """Number of structures S."""
        return int(self.ids.shape[0])

    @property
    def n_atoms(self) -> int:
        """Number of atoms N."""
        return int(self.structure_index.shape[0])


def gather_features(
    elements: Sequence[str],
    vals: dict[str, list],
    aidx: dict[str, list],
    pairs: dict[str, dict[str, list]],
    feat_idx: dict[tuple[str, str], Any],
    join: Callable[[list, bool], torch.Tensor],
) -> dict[str, DescriptorResult]:
    """Per element, one :class:`DescriptorResult` of a batch from its structures' pieces.

    ``vals``/``aidx``: per element, the value rows and atom indices of each piece;
    ``pairs``: per element and neighbour element, pieces ``(first, second, center,
    vectors, dG_dr)``; ``feat_idx``: the feature index of each (element, neighbour).
    ``join(pieces, floating)`` concatenates pieces into one tensor (``floating``: values,
    vectors, dG/dr, which may change dtype).
    """
    features: dict[str, DescriptorResult] = {}
    for e in elements:
        if not vals[e]:
            continue
        pd_out = None
        if pairs[e]:
            pd_out = {}
            for f, lst in pairs[e].items():
                cat = [join([x[k] for x in lst], k in (3, 4)) for k in range(5)]
                pd_out[f] = PairDerivatives(
                    pair_first=cat[0], pair_second=cat[1], center=cat[2], vectors=cat[3],
                    feature_index=torch.as_tensor(feat_idx[(e, f)]), dG_dr=cat[4],
                )  # fmt: skip
        features[e] = DescriptorResult(
            values=join(vals[e], True), atom_index=join(aidx[e], False), pairs=pd_out
        )
    return features


def collate(
    items: Sequence[tuple[PartitionData, int]],
    elements: Sequence[str],
    dtype: torch.dtype = torch.float64,
) -> Batch:
    """Build a :class:`Batch` from ``(partition, local structure)`` items (re-indexed)."""
    groups: OrderedDict[int, tuple[PartitionData, list[int]]] = OrderedDict()
    for part, s in items:
        groups.setdefault(id(part), (part, []))[1].append(int(s))
    ids, counts, energy, forces = [], [], [], []
    vals: dict[str, list] = {e: [] for e in elements}
    aidx: dict[str, list] = {e: [] for e in elements}
    pairs: dict[str, dict[str, list]] = {e: {} for e in elements}
    feat_idx: dict[tuple[str, str], np.ndarray] = {}
    atom_base = 0
    row_base = dict.fromkeys(elements, 0)
    for part, sel_list in groups.values():
        sel = np.asarray(sel_list, np.int64)
        off = part.offsets
        atoms = _ranges(off[sel], off[sel + 1])  # (n,) local rows, in batch order
        n_part = int(off[-1])
        amap = np.full(n_part, -1, np.int64)
        amap[atoms] = atom_base + np.arange(atoms.shape[0])
        ids.append(part.ids[sel])
        counts.append(off[sel + 1] - off[sel])
        energy.append(part.energy[sel])
        forces.append(part.forces[atoms])
        for e in elements:
            ea = part.elements.get(e)
            if ea is None:
                continue
            rows = _ranges(ea.offsets[sel], ea.offsets[sel + 1])
            rmap = np.full(ea.values.shape[0], -1, np.int64)
            rmap[rows] = row_base[e] + np.arange(rows.shape[0])
            vals[e].append(ea.values[rows])
            aidx[e].append(amap[ea.atom_index[rows]])
            for f, pa in ea.pairs.items():
                pr = _ranges(pa.offsets[sel], pa.offsets[sel + 1])
                lst = pairs[e].setdefault(f, [])
                lst.append(
                    (amap[pa.first[pr]], amap[pa.second[pr]], rmap[pa.center[pr]],
                     pa.vectors[pr], pa.dG_dr[pr])
                )  # fmt: skip
                feat_idx[(e, f)] = pa.feature_index
            row_base[e] += rows.shape[0]
        atom_base += atoms.shape[0]
    counts_np = np.concatenate(counts)

    def join(parts: list[np.ndarray], floating: bool) -> torch.Tensor:
        t = torch.from_numpy(np.concatenate(parts))
        return t.to(dtype) if floating else t

    features = gather_features(elements, vals, aidx, pairs, feat_idx, join)
    n_s = counts_np.shape[0]
    return Batch(
        ids=np.concatenate(ids),
        atom_counts=torch.from_numpy(counts_np).to(dtype),
        structure_index=torch.from_numpy(np.repeat(np.arange(n_s, dtype=np.int64), counts_np)),
        energy=torch.from_numpy(np.concatenate(energy)).to(dtype),
        forces=torch.from_numpy(np.concatenate(forces)).to(dtype),
        features=features,
    )


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
    split: str,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int = 0,
    epoch: int = 0,
    shuffle_buffer: int = 512,
    prefetch: int = 1,
    dtype: torch.dtype = torch.float64,
) -> Iterator[Batch]:
    """Mini-batches of every structure of ``split`` exactly once, streamed from the store.

    The batches are those of :class:`BatchPlan`; partitions are read in its order
    (``prefetch`` ahead in a thread) and dropped once their last structure is batched.
    """
    plan = BatchPlan(
        reader.index, split, batch_size, shuffle=shuffle, seed=seed, epoch=epoch,
        shuffle_buffer=shuffle_buffer,
    )  # fmt: skip
    code = SPLITS[split]
    left = {p: int(np.count_nonzero(reader.index.split[p] == code)) for p in plan.partitions}
    stream = reader.stream(plan.partitions, prefetch)
    loaded: dict[int, PartitionData] = {}
    try:
        for items in plan:
            for p, _ in items:
                while p not in loaded:
                    part = next(stream)
                    loaded[part.p] = part
            batch = reader.collate([(loaded[p], s) for p, s in items], dtype)
            for p, _ in items:
                left[p] -= 1
                if left[p] == 0:
                    del loaded[p]
            yield batch
    finally:
        stream.close()
