"""Training data without stored descriptors: structures, neighbour lists, mini-batches.

With ``descriptor_source: computed`` (docs/training.md) training reads only the store's
``structures`` group. Each partition's full neighbour list is built once on the host when
the partition is read and kept with it in the reader's cache (it depends on the positions
only). A mini-batch carries positions, species, pairs and the constant image offsets S·cell
of each pair (its :class:`~dparallel.train.batch.Geometry`), or the values and dG/dr the
descriptor's kernel computed. :class:`StructureReader` is a
:class:`~dparallel.train.data.PartitionReader`, so the same split index, cache, threads and
shuffle buffer give the same batches, in the same order, as stored descriptors.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from ase.data import atomic_numbers

from dparallel.descriptors.registry import descriptor_graph, descriptor_kind
from dparallel.errors import TrainingError
from dparallel.neighbors import Neighbors, neighbor_list
from dparallel.train.batch import (
    Assembled,
    Batch,
    Geometry,
    PartitionData,
    Rows,
    assemble,
    make_batch,
)
from dparallel.train.data import PartitionReader, check_labels
from dparallel.train.gather_ops import HOST, HostOps
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dparallel.store import Store
    from dparallel.train.splits import SplitIndex


def choose_engine(
    name: str, requested: str, needs_derivatives: bool, device_type: str = "cpu"
) -> str:
    """The engine ``compute_with: auto`` means: ``"kernel"`` or ``"graph"``.

    ``kernel`` for an optimizer that needs dG/dr (the Kalman filter) and on the CPU when
    the descriptor has a compiled route (ACSF with numba); ``graph`` otherwise (a GPU, or
    no kernel).
    """
    if requested != "auto":
        return requested
    kind = descriptor_kind(name)
    compiled = kind.numpy_route is not None and kind.numpy_route()
    if needs_derivatives or (device_type == "cpu" and compiled):
        return "kernel"
    return "graph"


class StructureReader(PartitionReader):
    """Reads partitions' structures and builds their neighbour lists (no features).

    Only the store's ``structures`` group and attributes are read; ``descriptor`` is the
    registered descriptor (``training.descriptor``) with the store's ``config`` of it
    (``config.features.<descriptor>``); the other parameters are the
    :class:`~dparallel.train.data.PartitionReader`'s (the cache holds the neighbour lists
    too). ``engine``: ``"graph"`` gives batches of positions and pairs, whose descriptors and
    forces the descriptor's torch graph and autograd compute on the batch's device
    (:func:`~dparallel.train.objective.predict_from_geometry`); ``"kernel"`` gives values and
    dG/dr computed per batch on the host by the descriptor's ``compute`` (ACSF: the compiled
    kernel featurize runs), trained as stored ones.
    """

    holdable: ClassVar[bool] = False  # the structures stream; their pairs are cached

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
        kind = descriptor_kind(descriptor)
        if engine == "graph" and kind.graph is None:
            raise TrainingError(
                f"descriptor {descriptor!r} has no torch graph form: it cannot be computed "
                "during training; train with descriptor_source: stored"
            )
        self.descriptor_object = kind.from_dict(config)
        # the graph's elements and columns are the descriptor's (species index into them)
        self.graph = descriptor_graph(self.descriptor_object) if engine == "graph" else None
        self.descriptor_elements = [str(elem) for elem in self.descriptor_object.elements]
        missing = [elem for elem in self.elements if elem not in self.descriptor_elements]
        if missing:
            raise TrainingError(f"descriptor {descriptor!r} does not cover elements {missing}")
        self.cutoff = float(self.descriptor_object.r_cut)
        self._species_of = np.full(119, -1, np.int64)
        for elem in self.elements:
            self._species_of[atomic_numbers[elem]] = self.descriptor_elements.index(elem)

    def load(self, p: int) -> PartitionData:
        """Partition ``p``'s structures and their full neighbour list within the cutoff."""
        batch = self.store.read_partition(p)
        check_labels(self.store, p, batch.energy, batch.forces)
        species = self._species_of[batch.numbers]
        if np.any(species < 0):
            bad = sorted(set(batch.numbers[species < 0].tolist()))
            raise TrainingError(
                f"{self.store.target}: partition {p} has atomic numbers {bad} that are not "
                f"among the model's elements {self.elements}"
            )
        nl = neighbor_list(batch, self.cutoff)  # sorted by pair_first
        pair_struct = batch.structure_index[nl.pair_first]
        offsets = np.einsum("pk,pkc->pc", nl.shifts.astype(np.float64), batch.cells[pair_struct])
        structures = {"energy": batch.energy, "cells": batch.cells, "pbc": batch.pbc}
        atoms = {"forces": batch.forces, "positions": batch.positions, "numbers": batch.numbers,
                 "species": species}  # fmt: skip
        pairs = {"first": nl.pair_first, "second": nl.pair_second, "offsets": offsets,
                 "shifts": nl.shifts}  # fmt: skip
        rows = {
            "structures": Rows(np.arange(batch.n_structures + 1), structures),
            "atoms": Rows(batch.offsets, atoms),
            "pairs": Rows(
                np.searchsorted(nl.pair_first, batch.offsets).astype(np.int64),
                pairs,
                refs={"first": "atoms", "second": "atoms"},
            ),
        }
        nbytes = sum(a.nbytes for t in (structures, atoms, pairs) for a in t.values())
        return PartitionData(p, self.index.ids[p], self.index.split[p], rows, nbytes)

    def batch(
        self,
        items: Sequence[tuple[PartitionData, int]],
        dtype: torch.dtype | None = torch.float64,
        ops: HostOps = HOST,
    ) -> Batch:
        """A mini-batch of ``(partition, local structure)`` items (re-indexed; gathered on
        the host with ``ops``, which must give numpy columns).

        With ``engine="graph"`` its :class:`~dparallel.train.batch.Geometry` (descriptors
        are computed when it is predicted); with ``"kernel"`` its ``features``, whose
        values and dG/dr the descriptor's own ``compute`` gave here, on the host (in
        ``dtype``; ``None``: float64).
        """
        dtype = dtype or torch.float64
        got = assemble(items, ops)
        batch = make_batch(got, self.elements, dtype)
        if self.engine == "kernel":
            return replace(batch, features=self._kernel_features(got, dtype))
        atoms, pairs = got.tables["atoms"], got.tables["pairs"]
        species = atoms["species"]
        rows = {
            elem: torch.from_numpy(np.flatnonzero(species == self.descriptor_elements.index(elem)))
            for elem in self.elements
        }
        geometry = Geometry(
            positions=torch.from_numpy(atoms["positions"]).to(dtype),
            species=torch.from_numpy(species),
            pair_first=torch.from_numpy(pairs["first"]),
            pair_second=torch.from_numpy(pairs["second"]),
            pair_offsets=torch.from_numpy(pairs["offsets"]).to(dtype),
            element_rows=rows,  # every element, rows or none, as a stored batch's features
            graph=self.graph,
        )
        return replace(batch, geometry=geometry)

    def _kernel_features(self, got: Assembled, dtype: torch.dtype) -> dict[str, Any]:
        """Values and dG/dr of the batch's structures from the descriptor's ``compute``."""
        s, a, pairs = got.tables["structures"], got.tables["atoms"], got.tables["pairs"]
        structures = StructureBatch(
            numbers=a["numbers"],
            positions=a["positions"],
            cells=s["cells"],
            pbc=s["pbc"],
            energy=s["energy"],
            forces=a["forces"],
            offsets=np.concatenate([[0], np.cumsum(got.counts)]),
        )
        first, second = pairs["first"], pairs["second"]
        vectors = a["positions"][second] - a["positions"][first] + pairs["offsets"]
        neighbors = Neighbors(
            first, second, pairs["shifts"], vectors, np.linalg.norm(vectors, axis=1)
        )
        out = self.descriptor_object.compute(
            structures, derivatives=self.forces, neighbors=neighbors, dtype=dtype
        )
        return {elem: out[elem] for elem in self.elements if elem in out}
