"""A training store held in device memory: batches gathered on the device by index.

:class:`ResidentData` loads every done partition's arrays once (labels, descriptor values,
pair indices, ∂G/∂r, in the training dtype) onto the device; :meth:`ResidentData.collate`
then builds the same :class:`~dparallel.train.data.Batch` as
:func:`~dparallel.train.data.collate` by gathers on the device. Per batch the host only
handles per-structure offsets (O(structures)); every per-atom and per-pair index is made on
the device (``repeat_interleave`` with a known output size, so no synchronisation).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from dparallel.train.data import Batch, BatchPlan, gather_features, load_partition

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from dparallel.train.data import PartitionData, PartitionReader

__all__ = ["ResidentData", "load_resident"]

log = logging.getLogger(__name__)


@dataclass
class _Pairs:
    first: torch.Tensor
    second: torch.Tensor
    center: torch.Tensor
    vectors: torch.Tensor
    feature_index: torch.Tensor
    dG_dr: torch.Tensor
    offsets: np.ndarray  # (S + 1,) host


@dataclass
class _Element:
    values: torch.Tensor
    atom_index: torch.Tensor
    offsets: np.ndarray  # (S + 1,) host
    pairs: dict[str, _Pairs] = field(default_factory=dict)


@dataclass
class _Partition:
    offsets: np.ndarray  # (S + 1,) host
    ids: np.ndarray  # (S,) host
    energy: torch.Tensor
    forces: torch.Tensor
    elements: dict[str, _Element]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _on(a: np.ndarray, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.to(device=device, dtype=dtype if dtype is not None else t.dtype)


def _to_device(part: PartitionData, device: torch.device, dtype: torch.dtype) -> _Partition:
    elements = {}
    for e, ea in part.elements.items():
        el = _Element(_on(ea.values, device, dtype), _on(ea.atom_index, device), ea.offsets)
        for f, pa in ea.pairs.items():
            el.pairs[f] = _Pairs(
                _on(pa.first, device), _on(pa.second, device), _on(pa.center, device),
                _on(pa.vectors, device, dtype), _on(pa.feature_index, device),
                _on(pa.dG_dr, device, dtype), pa.offsets,
            )  # fmt: skip
        elements[e] = el
    return _Partition(
        part.offsets, part.ids, _on(part.energy, device, dtype), _on(part.forces, device, dtype),
        elements,
    )  # fmt: skip


def _partition_nbytes(p: _Partition) -> int:
    total = _nbytes(p.energy) + _nbytes(p.forces)
    for el in p.elements.values():
        total += _nbytes(el.values) + _nbytes(el.atom_index)
        for pa in el.pairs.values():
            total += sum(_nbytes(t) for t in (pa.first, pa.second, pa.center, pa.vectors, pa.dG_dr))
    return total


class ResidentData:
    """Every partition of a store on one device; batches by :class:`BatchPlan`, on device."""

    def __init__(
        self,
        reader: PartitionReader,
        partitions: dict[int, _Partition],
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.reader = reader
        self.partitions = partitions
        self.device = device
        self.dtype = dtype
        self.nbytes = sum(_partition_nbytes(p) for p in partitions.values())

    def _ranges(self, starts: np.ndarray, stops: np.ndarray) -> torch.Tensor:
        """Concatenated arange(a, b) per (a, b), on the device; sizes known on the host."""
        lengths = (stops - starts).astype(np.int64)
        total = int(lengths.sum())
        if total == 0:
            return torch.zeros(0, dtype=torch.int64, device=self.device)
        before = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        base = _on(starts - before, self.device)
        steps = torch.repeat_interleave(base, _on(lengths, self.device), output_size=total)
        return steps + torch.arange(total, device=self.device)

    def collate(self, items: Sequence[tuple[int, int]]) -> Batch:
        """The :class:`Batch` of ``(partition, local structure)`` items, gathered on device."""
        dev = self.device
        groups: OrderedDict[int, list[int]] = OrderedDict()
        for p, s in items:
            groups.setdefault(p, []).append(int(s))
        elements = self.reader.elements
        ids, counts, energy, forces = [], [], [], []
        vals: dict[str, list] = {e: [] for e in elements}
        aidx: dict[str, list] = {e: [] for e in elements}
        pairs: dict[str, dict[str, list]] = {e: {} for e in elements}
        feat_idx: dict[tuple[str, str], torch.Tensor] = {}
        atom_base, row_base = 0, dict.fromkeys(elements, 0)
        for p, sel_list in groups.items():
            part = self.partitions[p]
            sel = np.asarray(sel_list, np.int64)
            off = part.offsets
            n_atoms = int((off[sel + 1] - off[sel]).sum())
            atoms = self._ranges(off[sel], off[sel + 1])
            amap = torch.full((int(off[-1]),), -1, dtype=torch.int64, device=dev)
            amap[atoms] = atom_base + torch.arange(n_atoms, device=dev)
            ids.append(part.ids[sel])
            counts.append(off[sel + 1] - off[sel])
            energy.append(part.energy[_on(sel, dev)])
            forces.append(part.forces[atoms])
            for e in elements:
                el = part.elements.get(e)
                if el is None:
                    continue
                n_rows = int((el.offsets[sel + 1] - el.offsets[sel]).sum())
                rows = self._ranges(el.offsets[sel], el.offsets[sel + 1])
                rmap = torch.full((el.values.shape[0],), -1, dtype=torch.int64, device=dev)
                rmap[rows] = row_base[e] + torch.arange(n_rows, device=dev)
                vals[e].append(el.values[rows])
                aidx[e].append(amap[el.atom_index[rows]])
                for f, pa in el.pairs.items():
                    pr = self._ranges(pa.offsets[sel], pa.offsets[sel + 1])
                    pairs[e].setdefault(f, []).append(
                        (amap[pa.first[pr]], amap[pa.second[pr]], rmap[pa.center[pr]],
                         pa.vectors[pr], pa.dG_dr[pr])
                    )  # fmt: skip
                    feat_idx[(e, f)] = pa.feature_index
                row_base[e] += n_rows
            atom_base += n_atoms
        counts_np = np.concatenate(counts)
        features = gather_features(
            elements, vals, aidx, pairs, feat_idx, lambda parts, _: torch.cat(parts)
        )
        n_s = counts_np.shape[0]
        counts_dev = _on(counts_np, dev)
        return Batch(
            ids=np.concatenate(ids),
            atom_counts=counts_dev.to(self.dtype),
            structure_index=torch.repeat_interleave(
                torch.arange(n_s, device=dev), counts_dev, output_size=atom_base
            ),
            energy=torch.cat(energy),
            forces=torch.cat(forces),
            features=features,
        )

    def batches(self, plan: BatchPlan) -> Iterator[Batch]:
        """The batches of ``plan``, each gathered on the device."""
        for items in plan:
            yield self.collate(items)


def load_resident(
    reader: PartitionReader, device: torch.device, dtype: torch.dtype, budget: int | None
) -> ResidentData | None:
    """Every partition of ``reader``'s split index on ``device``, or None past ``budget``.

    ``budget`` (bytes; None = no limit) bounds what is held on the device: partitions are
    loaded one by one and, once their total would pass it, released again (the caller
    then streams). Partitions are read straight from the store (not via the reader's
    cache), so the host holds at most one at a time.
    """
    parts: dict[int, _Partition] = {}
    total = 0
    for p in reader.index.partitions:
        data = load_partition(
            reader.store, p, reader.descriptor, reader.elements, reader.index, reader.forces
        )
        part = _to_device(data, device, dtype)
        total += _partition_nbytes(part)
        if budget is not None and total > budget:
            log.info(
                "the store's arrays pass the device budget (%.2f GiB after %d of %d "
                "partitions): streaming them instead",
                budget / 2**30, len(parts) + 1, len(reader.index.partitions),
            )  # fmt: skip
            parts.clear()
            return None
        parts[p] = part
    return ResidentData(reader, parts, device, dtype)
