"""A store's reads: stored structures by index, a partition's features and arrays,
per-atom arrays, skipped records, reports and a summary."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import zarr
from zarr.core.sync import sync

from dparallel.errors import StoreError, StoreIncompleteError
from dparallel.store._chunks import read_keys
from dparallel.store._derivatives import BLOCK_ATTRIBUTES, decode_pairs
from dparallel.store._layout import _FEATURE_ARRAYS, _index_reason_pairs, _partition_group
from dparallel.store._opened import OpenedStore
from dparallel.store._read_cache import CachedReads
from dparallel.store._verify import Verification, verify_store
from dparallel.store.stats import FeatureStats, merge_into
from dparallel.types import StructureBatch

__all__ = ["StoreReads"]


class StoreReads(OpenedStore):
    """The reading half of :class:`~dparallel.store.Store`."""

    # ---------------------------------------------------------- partition groups
    def read_partition_arrays(self, p: int, group: str | None = None) -> dict[str, np.ndarray]:
        """Arrays written by :meth:`write_partition_arrays` for partition ``p``."""
        g = self._partition_group(int(p), create=False)
        if g is not None and group:
            g = g.get(group, None)  # type: ignore[assignment]
        if g is None:
            return {}
        with self._decoding(f"{_partition_group(int(p))}/{group or ''}"):
            return {name: self._read_whole(f"{g.path}/{name}", a) for name, a in g.arrays()}

    def read_features(
        self, p: int, descriptor: str, derivatives: bool = True
    ) -> dict[str, dict[str, np.ndarray]]:
        """Partition ``p``'s arrays of ``descriptor`` by central element (as written).

        Each element maps to ``values``, ``atom_index`` (local atom rows of the partition)
        and, if stored and ``derivatives``, ``d/<F>/<name>`` per neighbour element F.
        Elements without atoms in the partition are absent.
        """
        cached = self._backend.zarr_store
        if isinstance(cached, CachedReads):  # a store at a URL: all its objects at once
            sync(cached.prefetch(f"{_partition_group(int(p))}/features/{descriptor}/"))
        with self._decoding(f"{_partition_group(int(p))}/features/{descriptor}"):
            return self._read_features(int(p), descriptor, derivatives)

    def _read_features(
        self, p: int, descriptor: str, derivatives: bool
    ) -> dict[str, dict[str, np.ndarray]]:
        part = self._partition_group(p, create=False)
        node = None if part is None else part.get(f"features/{descriptor}")
        if not isinstance(node, zarr.Group):
            return {}
        out: dict[str, dict[str, np.ndarray]] = {}
        for element, group in sorted(node.groups()):
            arrays = {
                name: self._read_whole(f"{group.path}/{name}", a) for name, a in group.arrays()
            }
            lost = [name for name in _FEATURE_ARRAYS if name not in arrays]
            if lost:  # its zarr.json deleted or replaced: not an array any more
                raise StoreError(
                    f"{self.location}: cannot read {group.path}/{lost[0]} (no array there: "
                    f"its metadata is missing or corrupt); {self.repair}"
                )
            deriv = group.get("d") if derivatives else None
            if isinstance(deriv, zarr.Group):
                for neighbor, block in sorted(deriv.groups()):
                    stored = {
                        n: self._read_whole(f"{block.path}/{n}", a) for n, a in block.arrays()
                    }
                    if self._meta.get("format_version") != 1:  # format 1: stored as computed
                        kept = block.attrs.asdict()  # format 3: feature_index, radial
                        stored |= {k: np.asarray(kept[k]) for k in BLOCK_ATTRIBUTES if k in kept}
                        stored = decode_pairs(stored)
                    arrays.update({f"d/{neighbor}/{n}": v for n, v in stored.items()})
            out[element] = arrays
        return out

    def skipped(self) -> list[tuple[int, str]]:
        """Every recorded ``(source index, reason)``, sorted by index."""
        return sorted(r for rs in self._skipped_by_partition(range(self.n_partitions)) for r in rs)

    def _skipped_by_partition(self, partitions: Iterable[int]) -> list[list[tuple[int, str]]]:
        """The skipped records of each of ``partitions``: their group documents read at once
        (:mod:`~dparallel.store._chunks`), not group by group through zarr."""
        names = [f"{_partition_group(int(p))}/zarr.json" for p in partitions]
        where = self._root.store_path
        found = read_keys(where.store, [f"{where.path}/{n}".lstrip("/") for n in names])
        out: list[list[tuple[int, str]]] = []
        for name, document in zip(names, found, strict=True):
            kept = None
            if document is not None:
                with self._decoding(name):
                    kept = json.loads(document).get("attributes", {}).get("skipped")
            out.append([(int(i), str(r)) for i, r in _index_reason_pairs(kept)])
        return out

    def summary(self) -> dict[str, Any] | None:
        """What ``info`` sums over the partitions, for the root attribute ``summary`` that
        :func:`~dparallel.store.publish_store` records once the store is complete:
        ``partitions``, ``n_structures``, ``n_atoms``, ``elements`` (atomic numbers) and
        ``skipped_partitions`` (those with skip records); ``None`` while incomplete."""
        flags = self._done_flags()
        if not flags.all():
            return None
        records = self._skipped_by_partition(range(self.n_partitions))
        return {
            "partitions": self.n_partitions,
            "n_structures": int(self._cumulative(flags)[-1]),
            "n_atoms": self._n_atoms(flags),
            "elements": self._elements(flags),
            "skipped_partitions": [p for p, rs in enumerate(records) if rs],
        }

    def report(self, p: int) -> dict[str, Any] | None:
        """The report stored by :meth:`mark_done`, if any."""
        g = self._partition_group(int(p), create=False)
        report = None if g is None else g.attrs.get("report")
        return dict(report) if isinstance(report, Mapping) else None

    def merged_statistics(
        self, reports: Mapping[int, Mapping[str, Any]] | None = None
    ) -> dict[str, dict[str, FeatureStats]]:
        """Every done partition's feature statistics (their reports' ``stats``) merged
        exactly, in any order: ``{descriptor: {element: FeatureStats}}``, what featurize
        records as ``statistics`` once the store is complete; ``reports`` (partition →
        report in hand) spares reading those partitions' from the store."""
        merged: dict[str, dict[str, FeatureStats]] = {}
        known = reports or {}
        for p in self.done_partitions().tolist():
            report = known.get(p) or self.report(p)
            if report is None:
                raise StoreError(
                    f"{self.target}: partition {p} is done but its report, which holds its "
                    "statistics, is gone: rerun the featurize command to compute it again"
                )
            for name, per_elem in report.get("stats", {}).items():
                for elem, data in per_elem.items():
                    merge_into(merged.setdefault(name, {}), elem, FeatureStats.from_json(data))
        return merged

    # ---------------------------------------------------------- per-atom arrays
    def read_atom_array(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows of ``atoms/<name>`` for the atoms of stored structures ``[start, stop)``."""
        parts = [
            self._read_written(f"atoms/{name}", a, b) for a, b in self._atom_row_ranges(start, stop)
        ]
        if not parts:
            arr = self._array(f"atoms/{name}")
            return np.zeros((0, *arr.shape[1:]), dtype=arr.dtype)
        return np.concatenate(parts)

    # ---------------------------------------------------------- stored structures
    def _cumulative(self, done: np.ndarray | None = None) -> np.ndarray:
        """(P + 1,) first stored-structure index of each partition (done ones only count),
        kept; ``done``: the caller's fresh :meth:`_done_flags`, counted again where they
        are not those the kept one counted (partitions done or cleared by another object)."""
        kept = self._cum_done
        if (
            self._cum is None
            or kept is None
            or (done is not None and not np.array_equal(done, kept))
        ):
            done = self._done_flags() if done is None else done
            n = self._read_done_rows("partitions/n_structures", done)
            self._cum = np.concatenate([[0], np.cumsum(np.where(done, n, 0))]).astype(np.int64)
            self._cum_done = done.copy()  # the caller's array may change
        return self._cum

    @property
    def n_structures(self) -> int:
        """Structures stored by done partitions (all valid structures once complete)."""
        return int(self._cumulative()[-1])

    def __len__(self) -> int:
        return self.n_structures

    @property
    def n_atoms(self) -> int:
        """Atoms stored by done partitions."""
        return self._n_atoms(self._done_flags())

    def _n_atoms(self, done: np.ndarray) -> int:
        return int(self._read_done_rows("partitions/n_atoms", done)[done].sum())

    @property
    def elements(self) -> list[int]:
        """Sorted atomic numbers present in done partitions."""
        return self._elements(self._done_flags())

    def _elements(self, done: np.ndarray) -> list[int]:
        present = self._read_done_rows("partitions/elements", done)[done].any(axis=0)
        return [int(z) for z in np.flatnonzero(present)]

    def _partition_spans(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """``(partition, local start, local stop)`` covering stored structures [start, stop)."""
        if not self.is_complete:
            raise StoreIncompleteError(
                f"{self.location}: {len(self.pending_partitions())} of {self.n_partitions} "
                "partitions are not done; finish the run (e.g. re-run `dparallel ingest`) "
                "or read done partitions with read_partition(p)"
            )
        cum = self._cumulative()
        n = int(cum[-1])
        if not 0 <= start <= stop <= n:
            raise IndexError(f"structure range [{start}, {stop}) outside [0, {n})")
        out = []
        p = int(np.searchsorted(cum, start, side="right")) - 1
        while start < stop:
            take = min(stop, int(cum[p + 1]))
            if take > start:
                out.append((p, start - int(cum[p]), take - int(cum[p])))
            start = max(start, take)
            p += 1
        return out

    def _atom_offsets(self, p: int, upto: int) -> np.ndarray:
        """(upto + 1,) first atom row (within partition ``p``) of its first ``upto``
        structures, and the end."""
        K = self.structure_slots
        counts = self._read_written("structures/n_atoms", p * K, p * K + upto)
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def _atom_row_ranges(self, start: int, stop: int) -> list[tuple[int, int]]:
        """Global atom rows ``[a, b)`` of stored structures ``[start, stop)``, by partition."""
        out = []
        for p, a, b in self._partition_spans(start, stop):
            off = self._atom_offsets(p, b)
            out.append((p * self.atom_slots + int(off[a]), p * self.atom_slots + int(off[b])))
        return out

    def _read_partition_rows(self, p: int, a: int, b: int) -> tuple[StructureBatch, np.ndarray]:
        """Partition ``p``'s structures ``[a, b)`` (local rows) and their source indices."""
        A, K = self.atom_slots, self.structure_slots
        off = self._atom_offsets(p, b)
        ra, rb = p * A + int(off[a]), p * A + int(off[b])
        sa, sb = p * K + a, p * K + b

        def get(name: str, lo: int, hi: int) -> np.ndarray:
            return self._read_written(f"structures/{name}", lo, hi)

        batch = StructureBatch(
            numbers=get("numbers", ra, rb).astype(np.int64),
            positions=get("positions", ra, rb),
            cells=get("cells", sa, sb),
            pbc=get("pbc", sa, sb),
            energy=get("energy", sa, sb),
            forces=get("forces", ra, rb),
            offsets=off[a : b + 1] - off[a],
            tags=np.asarray(get("tags", sa, sb), dtype=object),
        )
        return batch, get("source_index", sa, sb)

    def read_structures(self, start: int = 0, stop: int | None = None) -> StructureBatch:
        """Stored structures ``[start, stop)`` as one batch; reads only their chunks."""
        stop = self.n_structures if stop is None else stop
        return StructureBatch.concatenate(
            [
                self._read_partition_rows(p, a, b)[0]
                for p, a, b in self._partition_spans(start, stop)
            ]
        )

    def source_indices(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """(stop − start,) int64 index in the source file of each stored structure."""
        stop = self.n_structures if stop is None else stop
        K = self.structure_slots
        parts = [
            self._read_written("structures/source_index", p * K + a, p * K + b)
            for p, a, b in self._partition_spans(start, stop)
        ]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def read_partition(self, p: int) -> StructureBatch:
        """The structures partition ``p`` stored (it must be done)."""
        p, n = self._done_count(p)
        return self._read_partition_rows(p, 0, n)[0]

    def partition_source_indices(self, p: int) -> np.ndarray:
        """(S_p,) int64 source index of each structure partition ``p`` stored (it must be
        done; a store still incomplete has them too, unlike :meth:`source_indices`)."""
        p, n = self._done_count(p)
        K = self.structure_slots
        return self._read_written("structures/source_index", p * K, p * K + n)

    def _done_count(self, p: int) -> tuple[int, int]:
        """``(p, structures it stored)`` for a done partition ``p``; else a
        :class:`StoreIncompleteError`."""
        p = int(p)
        if not self._is_done(p):
            raise StoreIncompleteError(f"{self.location}: partition {p} is not done")
        return p, int(self._read_written("partitions/n_structures", p, p + 1)[0])

    # ---------------------------------------------------------- summary
    def arrays(self) -> dict[str, dict[str, Any]]:
        """Every array: ``{path: {shape, dtype, chunks}}``."""
        out: dict[str, dict[str, Any]] = {}

        def walk(group: zarr.Group, prefix: str) -> None:
            for name, node in group.members():
                key = f"{prefix}{name}"
                if key == "parts":  # a group per partition: its arrays are not listed
                    continue
                if isinstance(node, zarr.Group):
                    walk(node, key + "/")
                else:
                    out[key] = {
                        "shape": list(node.shape),
                        "dtype": str(node.dtype),
                        "chunks": list(node.chunks),
                    }

        with self._decoding("an array's metadata"):
            walk(self._root, "")
        return dict(sorted(out.items()))

    def verify(self) -> Verification:
        """Read and decode every chunk the done partitions should have: what is missing
        or unreadable, by partition and array (``dparallel info --verify``; the cost of
        reading the whole store once)."""
        return verify_store(self)

    def info(self) -> dict[str, Any]:
        """Summary: counts, elements, completeness, skipped, arrays, source, config.

        ``n_structures`` / ``n_atoms`` count what the done partitions store; ``source`` is
        the input file's fingerprint, whose counts are the file's frames and the atoms they
        declare, skipped and broken frames included (docs/store-format.md).
        """
        from ase.data import chemical_symbols

        flags = self._done_flags()  # read once: each per-partition array is a chunk per partition
        done = np.flatnonzero(flags)
        kept: dict[str, Any] = self._meta.get("summary") or {}
        parts: Iterable[int]
        if len(done) == self.n_partitions and _is_summary(kept, self.n_partitions):
            # complete: the counts recorded when it was completed, not P chunks each
            n_structures, n_atoms = int(kept["n_structures"]), int(kept["n_atoms"])
            elements, parts = kept["elements"], kept["skipped_partitions"]
        else:
            n_structures = int(self._cumulative(flags)[-1])
            n_atoms, elements = self._n_atoms(flags), self._elements(flags)
            parts = range(self.n_partitions)
        skipped = sorted(r for rs in self._skipped_by_partition(parts) for r in rs)
        return {
            "path": self.location,
            # where zarr/xarray open it: the generation of a store at a URL, else the path
            "zarr_root": str(self.root) if self.root is not None else self.location,
            "format_version": self._meta["format_version"],
            "n_structures": n_structures,
            "n_atoms": n_atoms,
            "elements": [chemical_symbols[z] for z in elements],
            "complete": len(done) == self.n_partitions,
            "partitions_done": len(done),
            "partitions_total": self.n_partitions,
            "slots": dict(self._meta["slots"]),
            "skipped": [{"index": i, "reason": r} for i, r in skipped],
            "n_skipped": len(skipped),
            "source": self._meta["source"],
            "config": self._meta["config"],
            "versions": self._meta["versions"],
            "arrays": self.arrays(),
        }


def _is_summary(kept: Any, n_partitions: int) -> bool:
    """Whether ``kept`` is a :meth:`StoreReads.summary` of a store of ``n_partitions``."""
    if not isinstance(kept, Mapping) or kept.get("partitions") != n_partitions:
        return False
    ints = all(isinstance(kept.get(k), int) for k in ("n_structures", "n_atoms"))
    lists = all(isinstance(kept.get(k), list) for k in ("elements", "skipped_partitions"))
    return ints and lists
