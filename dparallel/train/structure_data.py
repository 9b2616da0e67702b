"""Training data without stored descriptors: structures, neighbour lists, mini-batches.

With ``descriptor_source: computed`` (docs/training.md) training reads only the store's
``structures`` group (positions, cells, pbc, numbers, energy, forces). Each partition's
full neighbour list (:func:`dparallel.neighbors.neighbor_list`, pairs and image shifts) is
built once on the host when the partition is read and kept with it in the reader's cache:
it depends on the positions only, which training never changes. A mini-batch
(:class:`ComputedBatch`) carries positions, species, pairs and the constant image offsets
S·cell of each pair; :func:`dparallel.train.computed.predict_from_structures` turns it into
descriptors, energies and forces on whatever device the tensors are on.

:class:`StructureReader` is a :class:`~dparallel.train.data.PartitionReader`, so the same
split index, LRU cache, prefetch thread and shuffle buffer
(:func:`~dparallel.train.data.iterate_batches`) give the same batches, in the same order,
as training from stored descriptors.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dparallel.descriptors.registry import descriptor_kind
from dparallel.errors import TrainingError
from dparallel.neighbors import Neighbors, neighbor_list
from dparallel.train.data import Batch, PartitionData, PartitionReader, _ranges
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dparallel.store import Store
    from dparallel.train.data import SplitIndex

__all__ = [
    "ComputedBatch",
    "StructurePartition",
    "StructureReader",
    "choose_engine",
    "descriptor_graph_of",
    "descriptor_of",
]


def choose_engine(name: str, requested: str, optimizer: str, device_type: str = "cpu") -> str:
    """The engine ``compute_with: auto`` means: ``"kernel"`` or ``"graph"``.

    ``kernel`` for the Kalman filter (it needs dG/dr) and on the CPU when the descriptor
    has a compiled route (ACSF with numba); ``graph`` otherwise (a GPU, or no kernel).
    """
    if requested != "auto":
        return requested
    kind = descriptor_kind(name)
    compiled = kind.numpy_route is not None and kind.numpy_route()
    if optimizer == "kalman" or (device_type == "cpu" and compiled):
        return "kernel"
    return "graph"


def descriptor_of(name: str, config: Mapping[str, Any]) -> Any:
    """The store's descriptor ``name`` built from ``config`` (its ``to_dict()``)."""
    return descriptor_kind(name).load().from_dict(dict(config))


def descriptor_graph_of(name: str, config: Mapping[str, Any]) -> torch.nn.Module:
    """The traceable torch form of the store's descriptor ``name`` built from ``config``.

    ``config`` is the store's ``config.features.<name>`` (the descriptor's ``to_dict()``);
    the registry (:mod:`dparallel.descriptors.registry`) gives the class and its graph.
    """
    kind = descriptor_kind(name)
    if kind.graph is None:
        raise TrainingError(
            f"descriptor {name!r} has no torch graph form: it cannot be computed during "
            "training; train with descriptor_source: stored"
        )
    graph: torch.nn.Module = kind.graph()(descriptor_of(name, config))
    return graph


@dataclass(eq=False, kw_only=True)
class StructurePartition(PartitionData):
    """One partition's structures and neighbour list (numpy, partition-local rows)."""

    positions: np.ndarray  # (N, 3) Å
    numbers: np.ndarray  # (N,) int64 atomic numbers
    cells: np.ndarray  # (S, 3, 3) Å
    pbc: np.ndarray  # (S, 3) bool
    species: np.ndarray  # (N,) int64 index into the descriptor's elements
    pair_first: np.ndarray  # (P,) int64 centre atom row, sorted
    pair_second: np.ndarray  # (P,) int64 neighbour atom row
    pair_offsets: np.ndarray  # (P, 3) Å, S·cell of each pair (r_ij = r_j − r_i + S·cell)
    pair_shifts: np.ndarray  # (P, 3) int64 image shift S
    pair_rows: np.ndarray  # (S + 1,) pair rows of each structure


@dataclass
class ComputedBatch(Batch):
    """A mini-batch of structures for descriptors computed on the fly (no ``features``).

    Atoms and pairs are numbered from 0; ``element_rows[e]`` are the (sorted) atom rows of
    element ``e``, found on the host so the device never waits for a ``nonzero``.
    """

    positions: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 3))  # (N, 3) Å
    species: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    pair_first: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    pair_second: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    pair_offsets: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 3))  # (P, 3) Å
    element_rows: dict[str, torch.Tensor] = field(default_factory=dict)
    graph: Any = None  # the descriptor's torch graph (shared, not copied)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> ComputedBatch:
        """This batch with every tensor (and the descriptor graph) on ``device``."""

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=non_blocking)

        return replace(
            self,
            atom_counts=move(self.atom_counts),
            structure_index=move(self.structure_index),
            energy=move(self.energy),
            forces=move(self.forces),
            positions=move(self.positions),
            species=move(self.species),
            pair_first=move(self.pair_first),
            pair_second=move(self.pair_second),
            pair_offsets=move(self.pair_offsets),
            element_rows={e: move(r) for e, r in self.element_rows.items()},
            graph=self.graph.to(device) if self.graph is not None else None,
        )


class StructureReader(PartitionReader):
    """Reads partitions' structures and builds their neighbour lists (no features).

    Parameters
    ----------
    store
        The store; only its ``structures`` group and attributes are read.
    descriptor
        Name of the registered descriptor (``training.descriptor``).
    config
        The descriptor's configuration from the store (``config.features.<descriptor>``).
    elements
        The model's elements (the descriptor's, in its order).
    index
        Split index of the store's done partitions.
    forces
        Whether force labels are trained (the reader always keeps them).
    cache_bytes
        Bound of the LRU cache of read partitions (with their neighbour lists).
    engine
        ``"graph"``: batches of positions and pairs, descriptors and forces computed from
        them by the descriptor's torch graph and autograd on the batch's device
        (:func:`~dparallel.train.computed.predict_from_structures`); ``"kernel"``: values
        and dG/dr computed per batch on the host by the descriptor's ``compute`` (ACSF: the
        compiled kernel featurize runs), trained as stored ones.
    """

    def __init__(
        self,
        store: Store,
        descriptor: str,
        config: Mapping[str, Any],
        elements: Sequence[str],
        index: SplitIndex,
        forces: bool,
        cache_bytes: int = 0,
        engine: str = "graph",
    ) -> None:
        super().__init__(store, descriptor, elements, index, forces, cache_bytes)
        if engine not in ("graph", "kernel"):
            raise ValueError(f"engine must be 'graph' or 'kernel', got {engine!r}")
        self.engine = engine
        self.descriptor_object = descriptor_of(descriptor, config)
        # the graph's elements and columns are the descriptor's (species index into them)
        self.graph = descriptor_graph_of(descriptor, config) if engine == "graph" else None
        self.descriptor_elements = [str(e) for e in self.descriptor_object.elements]
        missing = [e for e in self.elements if e not in self.descriptor_elements]
        if missing:
            raise TrainingError(f"descriptor {descriptor!r} does not cover elements {missing}")
        from ase.data import atomic_numbers

        self.cutoff = float(self.descriptor_object.r_cut)
        self._species_of = np.full(119, -1, np.int64)
        for e in self.elements:
            self._species_of[atomic_numbers[e]] = self.descriptor_elements.index(e)

    def load(self, p: int) -> StructurePartition:
        """Partition ``p``'s structures and their full neighbour list within the cutoff."""
        batch = self.store.read_partition(p)
        species = self._species_of[batch.numbers]
        if np.any(species < 0):
            bad = sorted(set(batch.numbers[species < 0].tolist()))
            raise TrainingError(
                f"{self.store.path}: partition {p} has atomic numbers {bad} that are not "
                f"among the model's elements {self.elements}"
            )
        nl = neighbor_list(batch, self.cutoff)  # sorted by pair_first
        pair_struct = batch.structure_index[nl.pair_first]
        offsets = np.einsum("pk,pkc->pc", nl.shifts.astype(np.float64), batch.cells[pair_struct])
        data = StructurePartition(
            p=p,
            offsets=batch.offsets,
            energy=batch.energy,
            forces=batch.forces,
            ids=self.index.ids[p],
            split=self.index.split[p],
            elements={},
            positions=batch.positions,
            numbers=batch.numbers,
            cells=batch.cells,
            pbc=batch.pbc,
            species=species,
            pair_first=nl.pair_first,
            pair_second=nl.pair_second,
            pair_offsets=offsets,
            pair_shifts=nl.shifts,
            pair_rows=np.searchsorted(nl.pair_first, batch.offsets).astype(np.int64),
        )
        data.nbytes = (
            batch.positions.nbytes * 3 + species.nbytes * 2 + offsets.nbytes * 2
            + nl.pair_first.nbytes * 2
        )  # fmt: skip
        return data

    def collate(
        self, items: Sequence[tuple[PartitionData, int]], dtype: torch.dtype = torch.float64
    ) -> Batch:
        """A mini-batch of ``(partition, local structure)`` items (re-indexed).

        Structures are ordered as :func:`dparallel.train.data.collate` orders them. With
        ``engine="graph"`` a :class:`ComputedBatch` (positions and pairs; descriptors are
        computed when it is predicted); with ``"kernel"`` a :class:`Batch` whose values and
        dG/dr the descriptor's own ``compute`` gave here, on the host.
        """
        groups: OrderedDict[int, tuple[StructurePartition, list[int]]] = OrderedDict()
        for part, s in items:
            if not isinstance(part, StructurePartition):
                raise TypeError("StructureReader.collate needs partitions it read")
            groups.setdefault(id(part), (part, []))[1].append(int(s))
        cols: dict[str, list[np.ndarray]] = {
            k: [] for k in ("ids", "counts", "energy", "forces", "positions", "numbers",
                            "cells", "pbc", "species", "first", "second", "offsets", "shifts")
        }  # fmt: skip
        atom_base = 0
        for part, sel_list in groups.values():
            sel = np.asarray(sel_list, np.int64)
            off = part.offsets
            atoms = _ranges(off[sel], off[sel + 1])  # local rows, in batch order
            amap = np.full(int(off[-1]), -1, np.int64)
            amap[atoms] = atom_base + np.arange(atoms.shape[0])
            pairs = _ranges(part.pair_rows[sel], part.pair_rows[sel + 1])
            for key, value in (
                ("ids", part.ids[sel]),
                ("counts", off[sel + 1] - off[sel]),
                ("energy", part.energy[sel]),
                ("forces", part.forces[atoms]),
                ("positions", part.positions[atoms]),
                ("numbers", part.numbers[atoms]),
                ("cells", part.cells[sel]),
                ("pbc", part.pbc[sel]),
                ("species", part.species[atoms]),
                ("first", amap[part.pair_first[pairs]]),
                ("second", amap[part.pair_second[pairs]]),
                ("offsets", part.pair_offsets[pairs]),
                ("shifts", part.pair_shifts[pairs]),
            ):
                cols[key].append(value)
            atom_base += atoms.shape[0]
        cat = {k: np.concatenate(v) for k, v in cols.items()}
        counts = cat["counts"]
        labels: dict[str, Any] = {
            "ids": cat["ids"],
            "atom_counts": torch.from_numpy(counts).to(dtype),
            "structure_index": torch.from_numpy(
                np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
            ),
            "energy": torch.from_numpy(cat["energy"]).to(dtype),
            "forces": torch.from_numpy(cat["forces"]).to(dtype),
        }
        if self.engine == "kernel":
            return Batch(**labels, features=self._kernel_features(cat, dtype))
        species = cat["species"]
        rows = {
            e: torch.from_numpy(np.flatnonzero(species == self.descriptor_elements.index(e)))
            for e in self.elements
        }
        return ComputedBatch(
            **labels,
            features={},
            positions=torch.from_numpy(cat["positions"]).to(dtype),
            species=torch.from_numpy(species),
            pair_first=torch.from_numpy(cat["first"]),
            pair_second=torch.from_numpy(cat["second"]),
            pair_offsets=torch.from_numpy(cat["offsets"]).to(dtype),
            element_rows={e: r for e, r in rows.items() if r.shape[0]},
            graph=self.graph,
        )

    def _kernel_features(self, cat: dict[str, np.ndarray], dtype: torch.dtype) -> dict[str, Any]:
        """Values and dG/dr of the batch's structures from the descriptor's ``compute``."""
        counts = cat["counts"]
        structures = StructureBatch(
            numbers=cat["numbers"],
            positions=cat["positions"],
            cells=cat["cells"],
            pbc=cat["pbc"],
            energy=cat["energy"],
            forces=cat["forces"],
            offsets=np.concatenate([[0], np.cumsum(counts)]),
        )
        vectors = cat["positions"][cat["second"]] - cat["positions"][cat["first"]] + cat["offsets"]
        neighbors = Neighbors(
            cat["first"], cat["second"], cat["shifts"], vectors, np.linalg.norm(vectors, axis=1)
        )
        out = self.descriptor_object.compute(
            structures, derivatives=self.forces, neighbors=neighbors, dtype=dtype
        )
        return {e: out[e] for e in self.elements if e in out}
