"""The dparallel zarr store: slot layout, create/open, partition writes, reads.

See docs/store-format.md for the layout. Every array is created at final shape by the
client (:func:`create_store`); partition ``p`` owns whole chunks only (atom rows
``[p·A, (p+1)·A)``, structure rows ``[p·K, (p+1)·K)``, index ``p`` of the per-partition
arrays, and the group ``parts/<p>``), so processes write concurrently without locks.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import zarr
from zarr.codecs import BloscCodec
from zarr.core.chunk_key_encodings import DefaultChunkKeyEncoding

from dparallel.errors import StoreError, StoreIncompleteError, StoreMismatchError
from dparallel.store._derivatives import BLOCK_ATTRIBUTES, decode_pairs, encode_pairs
from dparallel.store._dims import feature_dims, generic_dims
from dparallel.store._direct import (
    read_array_metadata,
    writable,
    write_array,
    write_chunk,
    write_fill_chunk,
    write_group,
)
from dparallel.store.plan import Plan
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence

__all__ = ["FORMAT_VERSION", "SOURCE_IDENTITY_KEYS", "Store"]

log = logging.getLogger(__name__)

#: Version of the on-disk layout; bumped on incompatible changes. 2: per-pair derivatives
#: in float32, radial columns as one number per pair, feature-major (``_derivatives``);
#: 3: a block's derivative columns in one array, its feature index and radial flags as
#: attributes, chunk keys ``c.0.0`` (:data:`CHUNK_KEYS`).
FORMAT_VERSION = 3
#: Formats this dparallel reads (``mode="r"``); it writes :data:`FORMAT_VERSION` only.
READABLE_FORMATS = (1, 2, 3)
#: Fingerprint fields that identify a source's content (path and mtime may change).
SOURCE_IDENTITY_KEYS = (
    "format",
    "size",
    "n_structures",
    "n_atoms",
    "index_sha256",
    "sample_sha256",
)
_N_Z = 119  # atomic numbers 0..118
#: Compressor of numeric arrays: LZ4 behind a byte shuffle (pair indices shrink ~9x).
_NUMERIC_COMPRESSORS = (BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),)
#: Chunk keys ``c.0.0`` (one file in the array's folder) instead of zarr's ``c/0/0``, which
#: makes a folder per leading index: with the rest of format 3, a water partition with dG/dr
#: is 70 files and folders instead of 156. Each is an inode to allocate, and where many were
#: freed shortly before (a store replaced, a benchmark rerun) ext4 without a journal scans
#: past them: that cost a featurize task more CPU than writing its bytes
#: (docs/store-format.md, "Why few files").
CHUNK_KEYS = DefaultChunkKeyEncoding(separator=".")


def _compressors(dtype: Any) -> Any:
    """Compressors for an array of ``dtype``: LZ4/shuffle for numbers, zarr's default for
    strings.

    Floats too: a water partition's derivative arrays shrink 1.09x when its structures are
    all distinct (16.5 -> 15.1 kB/atom, ~70 ms per 6,600 atoms) and 1.5x in the benchmark's
    water x25 set, whose partitions repeat each structure 3-4 times (docs/store-format.md,
    "What LZ4 buys on derivatives"); values shrink ~3x.
    """
    if dtype is str or np.dtype(dtype).kind in "OUS":
        return "auto"
    return _NUMERIC_COMPRESSORS


# name → (axis "atom"|"structure", trailing shape, dtype, fill value)
_STRUCTURE_ARRAYS: dict[str, tuple[str, tuple[int, ...], Any, Any]] = {
    "numbers": ("atom", (), np.uint8, 0),
    "positions": ("atom", (3,), np.float64, 0.0),
    "forces": ("atom", (3,), np.float64, np.nan),
    "cells": ("structure", (3, 3), np.float64, 0.0),
    "pbc": ("structure", (3,), np.bool_, False),
    "energy": ("structure", (), np.float64, np.nan),
    "n_atoms": ("structure", (), np.int64, 0),
    "source_index": ("structure", (), np.int64, -1),
    "tags": ("structure", (), str, ""),
}


def _jsonable(config: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return json.loads(json.dumps(dict(config), sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"config must be JSON-serialisable: {exc}") from exc


_IDENTITY_ATTRS = {"format_version", "versions", "created", "source", "config", "plan", "slots"}


def _records(value: Any) -> list[tuple[Any, Any]]:
    """``[[index, reason], …]`` attributes as pairs (nothing for anything else)."""
    if not isinstance(value, list):
        return []
    return [(rec[0], rec[1]) for rec in value if isinstance(rec, list) and len(rec) == 2]


def _features_group(descriptor: str, element: str) -> str:
    """Group (below ``parts/<p>``) of one descriptor's arrays for one central element."""
    return f"features/{descriptor}/{element}"


class Store:
    """A dparallel zarr store opened for reading (``mode="r"``) or writing (``"r+"``).

    Picklable (path + mode), so a task can receive it and write its own partition.
    """

    def __init__(self, path: str | os.PathLike[str], mode: Literal["r", "r+"] = "r") -> None:
        self.path = Path(path).expanduser().resolve()
        self.mode = mode
        if not (self.path / "zarr.json").is_file():
            raise StoreError(f"no zarr store at {self.path}")
        self._root = zarr.open_group(str(self.path), mode=mode)
        meta = self._root.attrs.get("dparallel")
        if not isinstance(meta, dict):
            raise StoreError(f"{self.path} is a zarr group but not a dparallel store")
        version = meta.get("format_version")
        if version not in READABLE_FORMATS or (mode != "r" and version != FORMAT_VERSION):
            how = "reads" if version not in READABLE_FORMATS else "writes"
            raise StoreError(
                f"{self.path} has store format {version}, this dparallel {how} format "
                f"{FORMAT_VERSION}; re-featurize it (dparallel featurize … --overwrite)"
            )
        self._meta = meta
        self._starts = np.asarray(meta["plan"]["starts"], np.int64)  # (P,)
        self._stops = np.asarray(meta["plan"]["stops"], np.int64)  # (P,)
        self._cum: np.ndarray | None = None
        self._torn: set[int] = set()  # partitions whose done marker could not be read

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), "mode": self.mode}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["mode"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}, mode={self.mode!r}, partitions={self.n_partitions})"

    # ------------------------------------------------------------ metadata
    @property
    def attrs(self) -> dict[str, Any]:
        """The ``dparallel`` root attributes (versions, source, config, plan, slots)."""
        return dict(self._meta)

    def update_attrs(self, values: Mapping[str, Any]) -> None:
        """Add client-written summaries (e.g. ``statistics``) to the root attributes.

        Only the client writes these (one writer); identity keys cannot be changed.
        """
        if self.mode == "r":
            raise StoreError(f"{self.path} is open read-only")
        clash = sorted(_IDENTITY_ATTRS & set(values))
        if clash:
            raise StoreError(f"attributes {clash} define the store and cannot be updated")
        meta = {**self._meta, **_jsonable(values)}
        document = self.path / "zarr.json"
        before = document.read_bytes()
        try:
            self._root.attrs["dparallel"] = meta
        except OSError:
            # zarr rewrites zarr.json in place: a full disk can leave it truncated, and a
            # store without its root document is no store at all. Put the old one back
            # (it fits: its blocks were just freed) and report the failure.
            try:
                document.write_bytes(before)
            except OSError:
                log.error("%s could not be restored; the store needs it", document)
            raise
        self._meta = meta

    @property
    def plan(self) -> Plan:
        """The partition plan the store was created with."""
        return Plan.from_dict(self._meta["plan"])

    @property
    def n_partitions(self) -> int:
        """Number of partitions ``P``."""
        return int(self._starts.shape[0])

    def partition_range(self, p: int) -> tuple[int, int]:
        """Source structures ``[start, stop)`` owned by partition ``p``."""
        return int(self._starts[p]), int(self._stops[p])

    def partition_of(self, index: int) -> int:
        """The partition owning source structure ``index``."""
        return int(np.searchsorted(self._stops, int(index), side="right"))

    @property
    def atom_slots(self) -> int:
        """Atom rows per partition ``A``."""
        return int(self._meta["slots"]["atoms"])

    @property
    def structure_slots(self) -> int:
        """Structure rows per partition ``K``."""
        return int(self._meta["slots"]["structures"])

    def _array(self, name: str) -> zarr.Array:
        node = self._root[name]
        if not isinstance(node, zarr.Array):
            raise StoreError(f"{self.path}: {name} is not an array")
        return node

    def _read(self, name: str, start: int | None = None, stop: int | None = None) -> np.ndarray:
        """Rows ``[start, stop)`` of array ``name`` as numpy (all of it by default).

        Raises :class:`StoreError` naming the array when a chunk cannot be decoded (a file
        truncated by a full disk or a crash, or corrupted otherwise).
        """
        array = self._array(name)
        try:
            return np.asarray(array[start:stop])
        except (OSError, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001 - codec errors come in many types
            raise StoreError(
                f"{self.path}: cannot read {name} (a chunk is truncated or corrupt: "
                f"{type(exc).__name__}: {exc})"
            ) from None

    # ---------------------------------------------------------- completion
    def _done(self) -> np.ndarray:
        """(P,) bool done markers; a marker that cannot be read counts as not done.

        Each partition's marker is its own chunk, written last: one torn by a crash or a
        full disk means the partition's task did not finish, and a rerun redoes it.
        """
        try:
            return self._read("partitions/done").astype(bool)
        except StoreError:
            return np.asarray([self._is_done(p) for p in range(self.n_partitions)], bool)

    def _is_done(self, p: int) -> bool:
        """Partition ``p``'s done marker (unreadable: not done, see :meth:`_done`)."""
        try:
            return bool(self._read("partitions/done", p, p + 1)[0])
        except StoreError:
            if p not in self._torn:
                self._torn.add(p)
                log.warning("%s: the done marker of partition %d is unreadable", self.path, p)
            return False

    def done_partitions(self) -> np.ndarray:
        """Indices (int64, sorted) of the partitions marked done."""
        return np.flatnonzero(self._done()).astype(np.int64)

    def pending_partitions(self) -> np.ndarray:
        """Indices (int64, sorted) of the partitions not yet done."""
        return np.flatnonzero(~self._done()).astype(np.int64)

    @property
    def is_complete(self) -> bool:
        """True when every partition is done."""
        return len(self.done_partitions()) == self.n_partitions

    # --------------------------------------------------------------- writes
    def _check_p(self, p: int) -> int:
        p = int(p)
        if not 0 <= p < self.n_partitions:
            raise StoreError(f"partition {p} outside [0, {self.n_partitions})")
        if self.mode == "r":
            raise StoreError(f"{self.path} is open read-only")
        return p

    def write_structures(
        self, p: int, batch: StructureBatch, source_index: np.ndarray | None = None
    ) -> None:
        """Write partition ``p``'s (valid) structures into its slots, padding the rest.

        ``source_index`` (S,) gives each structure's index in the source file (default:
        the partition's range, i.e. nothing skipped). Rewrites the whole chunk, so a
        retried task overwrites what a failed attempt left.
        """
        p = self._check_p(p)
        A, K = self.atom_slots, self.structure_slots
        S, N = batch.n_structures, batch.n_atoms
        if source_index is None:
            source_index = np.arange(self._starts[p], self._starts[p] + S)
        source_index = np.asarray(source_index, np.int64).reshape(-1)  # (S,)
        lo, hi = self.partition_range(p)
        if S > K or N > A or source_index.shape[0] != S:
            raise StoreError(
                f"partition {p} holds at most {K} structures / {A} atoms, "
                f"got {S} structures / {N} atoms ({source_index.shape[0]} source indices)"
            )
        if S and (source_index.min() < lo or source_index.max() >= hi):
            raise StoreError(f"partition {p} owns source structures [{lo}, {hi}) only")
        values = {
            "numbers": batch.numbers.astype(np.uint8),
            "positions": batch.positions,
            "forces": batch.forces,
            "cells": batch.cells,
            "pbc": batch.pbc,
            "energy": batch.energy,
            "n_atoms": batch.atom_counts,
            "source_index": source_index,
            "tags": np.asarray([str(t) for t in batch.tags], dtype=str),
        }
        writes: list[tuple[str, slice, np.ndarray]] = []
        for name, (axis, trailing, dtype, fill) in _STRUCTURE_ARRAYS.items():
            cap = A if axis == "atom" else K
            if dtype is str:
                full = np.full(cap, "", dtype=object)
            else:
                full = np.full((cap, *trailing), fill, dtype=dtype)
            full[: values[name].shape[0]] = values[name]
            writes.append((f"structures/{name}", slice(p * cap, (p + 1) * cap), full))
        present = np.zeros((1, _N_Z), bool)
        present[0, np.unique(batch.numbers)] = True
        writes += [
            ("partitions/elements", slice(p, p + 1), present),
            ("partitions/n_structures", slice(p, p + 1), np.array([S])),
            ("partitions/n_atoms", slice(p, p + 1), np.array([N])),
        ]
        self._set_rows(writes)

    def _set_rows(self, writes: Sequence[tuple[str, slice, np.ndarray]]) -> None:
        """``array[rows] = values`` for every ``(array name, rows, values)``, all at once.

        Rows that are exactly one chunk of numbers (a partition's slots) are encoded and
        written to their chunk file from this thread (``store/_direct.py``), as is a chunk
        of strings that are all the fill value (removed, as zarr does); the rest (``tags``
        that are set) through zarr, opened and written concurrently in one call into its
        event loop (one after another, each open and write is a round trip).
        """
        import asyncio

        from zarr.core.sync import sync

        rest = [job for job in writes if not self._write_rows_direct(*job)]
        if not rest:
            return
        root = self._root._async_group

        async def write(name: str, rows: slice, values: np.ndarray) -> None:
            array = await root.getitem(name)
            if not isinstance(array, zarr.AsyncArray):
                raise StoreError(f"{self.path}: {name} is not an array")
            await array.setitem(rows, values)

        async def write_all() -> None:
            await asyncio.gather(*(write(*job) for job in rest))

        sync(write_all())

    def _write_rows_direct(self, name: str, rows: slice, values: np.ndarray) -> bool:
        """Write ``rows`` of array ``name`` as its chunk file if they are exactly one chunk
        zarr would encode as :func:`write_chunk` does; False (nothing written) otherwise."""
        directory = self.path.joinpath(*name.split("/"))
        meta = read_array_metadata(directory)
        if meta is None or not values.ndim or rows.step not in (None, 1):
            return False
        chunk_shape = getattr(meta.chunk_grid, "chunk_shape", None)
        start, stop = rows.start or 0, rows.stop
        if chunk_shape is None or start % chunk_shape[0] or stop is None:
            return False
        if stop - start != values.shape[0] or stop > meta.shape[0]:
            return False  # write_chunk checks the rest (shape = the chunk's, dtype, codecs)
        coords = (start // chunk_shape[0], *([0] * (values.ndim - 1)))
        if values.dtype.kind in "OUS":  # strings (tags): only a chunk of fill values here
            return write_fill_chunk(directory, meta, coords, values)
        return write_chunk(directory, meta, coords, values)

    def _part_group(self, p: int, create: bool) -> zarr.Group | None:
        key = f"parts/{p}"
        if key in self._root:
            return self._root[key]  # type: ignore[return-value]
        if not create:
            return None
        return zarr.open_group(str(self.path / "parts" / str(p)), mode="a")

    def record_skipped(self, records: Sequence[tuple[int, str]]) -> None:
        """Record skipped source structures ``(index, reason)`` in their partitions' groups.

        Each record goes to the partition owning that source index; call it only for the
        partitions this process writes (concurrency rule: one writer per partition).
        """
        by_part: dict[int, list[tuple[int, str]]] = {}
        for index, reason in records:
            by_part.setdefault(self.partition_of(int(index)), []).append((int(index), str(reason)))
        for p, recs in by_part.items():
            g = self._part_group(self._check_p(p), create=True)
            assert g is not None
            old = {int(i): str(r) for i, r in _records(g.attrs.get("skipped"))}
            old.update(dict(recs))
            g.attrs["skipped"] = [[i, old[i]] for i in sorted(old)]

    def skipped(self) -> list[tuple[int, str]]:
        """Every recorded ``(source index, reason)``, sorted by index."""
        out: list[tuple[int, str]] = []
        if "parts" not in self._root:
            return out
        for _, g in self._root["parts"].groups():  # type: ignore[union-attr]
            out += [(int(i), str(r)) for i, r in _records(g.attrs.get("skipped"))]
        return sorted(out)

    def mark_done(self, p: int, report: Mapping[str, Any] | None = None) -> None:
        """Mark partition ``p`` done (last write of a task); ``report`` kept in ``parts/<p>``."""
        p = self._check_p(p)
        if report is not None:
            g = self._part_group(p, create=True)
            assert g is not None
            g.attrs["report"] = _jsonable(report)
        self._array("partitions/done")[p] = 1
        self._cum = None

    def clear_done(self, p: int) -> None:
        """Mark partition ``p`` not done (before re-running it)."""
        self._array("partitions/done")[self._check_p(p)] = 0
        self._cum = None

    def report(self, p: int) -> dict[str, Any] | None:
        """The report stored by :meth:`mark_done`, if any."""
        g = self._part_group(int(p), create=False)
        report = None if g is None else g.attrs.get("report")
        return dict(report) if isinstance(report, Mapping) else None

    def write_partition_arrays(
        self,
        p: int,
        arrays: Mapping[str, np.ndarray],
        group: str | None = None,
        dims: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Write arrays whose size only the task knows into ``parts/<p>[/group]/<name>``.

        Each array is one chunk, (re)created by the owning task only. ``dims``: dimension
        names by array name (default ``<name>_<axis>``, see :mod:`dparallel.store._dims`).
        """
        self._write_groups(p, [(group, arrays, dims)])

    def _write_groups(
        self,
        p: int,
        entries: Sequence[
            tuple[str | None, Mapping[str, np.ndarray], Mapping[str, Sequence[str]] | None]
        ],
        attributes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """:meth:`write_partition_arrays` for several ``(group, arrays, dims)`` at once;
        ``attributes`` by group name, for groups made here.

        Numbers and booleans go straight to the files from this thread
        (``store/_direct.py``: the documents and chunks zarr would write, made by zarr's own
        classes; about half the CPU of its API for a water partition with dG/dr).
        Anything else (strings) is written through zarr, concurrently in one call into its
        event loop, each array created from its own group opened at its directory.
        """
        import asyncio

        from zarr.api.asynchronous import open_group
        from zarr.core.sync import sync

        p = self._check_p(p)
        part_dir = self.path / "parts" / str(p)
        write_group(part_dir)  # parts/<p> itself, unless there
        names = list(dict.fromkeys(group for group, _, _ in entries if group))
        levels = dict.fromkeys(  # every level of every group, parents first
            "/".join(parts[:depth])
            for parts in (name.split("/") for name in names)
            for depth in range(1, len(parts) + 1)
        )
        for level in levels:
            write_group(part_dir.joinpath(*level.split("/")), (attributes or {}).get(level))
        jobs = [
            (group, name, np.asarray(values), tuple((dims or {}).get(name, ())))
            for group, arrays, dims in entries
            for name, values in arrays.items()
        ]
        rest = []
        for group, name, values, dims in jobs:
            compressors = _compressors(values.dtype)
            if writable(values, compressors):
                directory = part_dir.joinpath(*(group or "").split("/"), name)
                dims = dims or generic_dims(name, values.ndim)
                write_array(directory, values, compressors, dims, CHUNK_KEYS)
            else:
                rest.append((group, name, values, dims))
        if not rest:
            return

        async def write(g: Any, name: str, values: np.ndarray, dims: tuple) -> None:
            array = await g.create_array(
                name,
                shape=values.shape,
                dtype=values.dtype,
                chunks=tuple(max(1, s) for s in values.shape),  # one chunk ((), for a scalar)
                compressors=_compressors(values.dtype),
                chunk_key_encoding=CHUNK_KEYS,
                dimension_names=dims or generic_dims(name, values.ndim),
                overwrite=True,
                # one chunk, written whole: no scan for an all-fill chunk to leave out (its
                # file is written instead; same content read back)
                config={"write_empty_chunks": True},
            )
            await array.setitem(..., values)

        part = self._part_group(p, create=True)
        assert part is not None

        async def write_all() -> None:
            wanted = list(dict.fromkeys(group for group, _, _, _ in rest if group))
            opened = await asyncio.gather(
                *(open_group(store=str(part_dir / n), mode="r+") for n in wanted)
            )
            groups = {None: part._async_group, "": part._async_group}
            groups.update(zip(wanted, opened, strict=True))
            await asyncio.gather(*(write(groups[g], n, v, d) for g, n, v, d in rest))

        sync(write_all())

    def read_partition_arrays(self, p: int, group: str | None = None) -> dict[str, np.ndarray]:
        """Arrays written by :meth:`write_partition_arrays` for partition ``p``."""
        g = self._part_group(int(p), create=False)
        if g is not None and group:
            g = g.get(group, None)  # type: ignore[assignment]
        if g is None:
            return {}
        return {name: np.asarray(a[...]) for name, a in g.arrays()}

    # ------------------------------------------------------------ features
    def write_features(
        self, p: int, features: Mapping[str, Mapping[str, Mapping[str, np.ndarray]]]
    ) -> None:
        """Write partition ``p``'s descriptors: ``features[descriptor][element][name]``.

        ``name`` is ``values``, ``atom_index`` or ``d/<F>/<array>`` for the per-pair
        derivatives with neighbour element F; they go to
        ``parts/<p>/features/<descriptor>/<element>/<name>`` (docs/store-format.md).

        What an earlier attempt at ``p`` left there (a task killed mid-write: groups whose
        parent has no metadata yet) is removed first, so every level is made anew.
        """
        left = self.path / "parts" / str(self._check_p(p)) / "features"
        if left.exists():
            shutil.rmtree(left)
        entries: list[tuple[str, Mapping[str, np.ndarray], Mapping[str, Sequence[str]]]] = []
        attributes: dict[str, dict[str, Any]] = {}  # feature_index, radial of each block
        for descriptor, per_element in features.items():
            for element, arrays in per_element.items():
                base = _features_group(descriptor, element)
                blocks: dict[str, dict[str, np.ndarray]] = {}
                plain = {}
                for name, value in arrays.items():
                    if name.startswith("d/"):
                        _, neighbor, key = name.split("/", 2)
                        blocks.setdefault(neighbor, {})[key] = value
                    else:
                        plain[name] = value
                dims = {n: feature_dims(element, n, np.ndim(a)) for n, a in plain.items()}
                entries.append((base, plain, dims))
                for neighbor, block in blocks.items():
                    stored = encode_pairs(block)  # format 3 layout (store/_derivatives.py)
                    group = f"{base}/d/{neighbor}"
                    attributes[group] = {
                        k: np.asarray(stored.pop(k)).tolist() for k in BLOCK_ATTRIBUTES
                    }
                    dims = {
                        n: feature_dims(element, f"d/{neighbor}/{n}", np.ndim(a))
                        for n, a in stored.items()
                    }
                    entries.append((group, stored, dims))
        self._write_groups(p, entries, attributes)

    def read_features(
        self, p: int, descriptor: str, derivatives: bool = True
    ) -> dict[str, dict[str, np.ndarray]]:
        """Partition ``p``'s arrays of ``descriptor`` by central element (as written).

        Each element maps to ``values``, ``atom_index`` (local atom rows of the partition)
        and, if stored and ``derivatives``, ``d/<F>/<name>`` per neighbour element F.
        Elements without atoms in the partition are absent.
        """
        part = self._part_group(int(p), create=False)
        node = None if part is None else part.get(f"features/{descriptor}")
        if not isinstance(node, zarr.Group):
            return {}
        out: dict[str, dict[str, np.ndarray]] = {}
        for element, group in sorted(node.groups()):
            arrays = {name: np.asarray(a[...]) for name, a in group.arrays()}
            deriv = group.get("d") if derivatives else None
            if isinstance(deriv, zarr.Group):
                for neighbor, block in sorted(deriv.groups()):
                    stored = {n: np.asarray(a[...]) for n, a in block.arrays()}
                    if self._meta.get("format_version") != 1:  # format 1: stored as computed
                        kept = block.attrs.asdict()  # format 3: feature_index, radial
                        stored |= {k: np.asarray(kept[k]) for k in BLOCK_ATTRIBUTES if k in kept}
                        stored = decode_pairs(stored)
                    arrays.update({f"d/{neighbor}/{n}": v for n, v in stored.items()})
            out[element] = arrays
        return out

    # ---------------------------------------------------- per-atom arrays
    def create_atom_array(
        self,
        name: str,
        trailing_shape: Sequence[int] = (),
        dtype: Any = np.float64,
        fill_value: Any = 0,
        attributes: Mapping[str, Any] | None = None,
        dims: Sequence[str] | None = None,
    ) -> None:
        """Create ``atoms/<name>`` of shape (P·A, *trailing_shape), one chunk per partition.

        Client-side, before tasks write; does nothing if it exists with the same spec.
        ``dims``: names of the trailing axes (default ``<name>_<axis>``); the first is ``atom``.
        """
        trailing = tuple(int(t) for t in trailing_shape)
        shape = (self.n_partitions * self.atom_slots, *trailing)
        key = f"atoms/{name}"
        if key in self._root:
            arr = self._array(key)
            if arr.shape != shape or np.dtype(arr.dtype) != np.dtype(dtype):
                raise StoreMismatchError(
                    f"{key} exists with shape {arr.shape} {arr.dtype}, asked {shape} {dtype}"
                )
            return
        self._root.create_array(
            key,
            shape=shape,
            chunks=(self.atom_slots, *trailing),
            dtype=dtype,
            fill_value=fill_value,
            compressors=_compressors(dtype),
            chunk_key_encoding=CHUNK_KEYS,
            attributes=dict(attributes or {}),
            dimension_names=("atom", *dims)
            if dims is not None
            else generic_dims(name, len(shape), ("atom",)),
        )

    def write_atom_array(self, name: str, p: int, values: np.ndarray) -> None:
        """Write partition ``p``'s rows (n_atoms of p, *trailing) of ``atoms/<name>``."""
        p = self._check_p(p)
        arr = self._array(f"atoms/{name}")
        A = self.atom_slots
        values = np.asarray(values, dtype=arr.dtype)
        if values.shape[0] > A or values.shape[1:] != arr.shape[1:]:
            raise StoreError(
                f"atoms/{name}: partition {p} takes up to ({A}, *{arr.shape[1:]}), "
                f"got {values.shape}"
            )
        full = np.full((A, *arr.shape[1:]), arr.fill_value, dtype=arr.dtype)
        full[: values.shape[0]] = values
        arr[p * A : (p + 1) * A] = full

    def read_atom_array(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows of ``atoms/<name>`` for the atoms of stored structures ``[start, stop)``."""
        arr = self._array(f"atoms/{name}")
        parts = [arr[a:b] for a, b in self._atom_row_ranges(start, stop)]
        if not parts:
            return np.zeros((0, *arr.shape[1:]), dtype=arr.dtype)
        return np.concatenate(parts)

    # ---------------------------------------------------------------- reads
    def _cumulative(self) -> np.ndarray:
        """(P + 1,) first stored-structure index of each partition (done ones only count)."""
        if self._cum is None:
            n = self._read("partitions/n_structures")
            done = self._done()
            self._cum = np.concatenate([[0], np.cumsum(np.where(done, n, 0))]).astype(np.int64)
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
        done = self._done()
        return int(self._read("partitions/n_atoms")[done].sum())

    @property
    def elements(self) -> list[int]:
        """Sorted atomic numbers present in done partitions."""
        done = self._done()
        present = self._read("partitions/elements")[done].any(axis=0)
        return [int(z) for z in np.flatnonzero(present)]

    def _spans(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """``(partition, local start, local stop)`` covering stored structures [start, stop)."""
        if not self.is_complete:
            raise StoreIncompleteError(
                f"{self.path}: {len(self.pending_partitions())} of {self.n_partitions} "
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

    def _local_offsets(self, p: int, upto: int) -> np.ndarray:
        K = self.structure_slots
        counts = self._array("structures/n_atoms")[p * K : p * K + upto]
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def _atom_row_ranges(self, start: int, stop: int) -> list[tuple[int, int]]:
        out = []
        for p, a, b in self._spans(start, stop):
            off = self._local_offsets(p, b)
            out.append((p * self.atom_slots + int(off[a]), p * self.atom_slots + int(off[b])))
        return out

    def _read_local(self, p: int, a: int, b: int) -> tuple[StructureBatch, np.ndarray]:
        A, K = self.atom_slots, self.structure_slots
        off = self._local_offsets(p, b)
        ra, rb = p * A + int(off[a]), p * A + int(off[b])
        sa, sb = p * K + a, p * K + b

        def get(name: str, lo: int, hi: int) -> np.ndarray:
            return self._read(f"structures/{name}", lo, hi)

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
            [self._read_local(p, a, b)[0] for p, a, b in self._spans(start, stop)]
        )

    def source_indices(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """(stop − start,) int64 index in the source file of each stored structure."""
        stop = self.n_structures if stop is None else stop
        K = self.structure_slots
        arr = self._array("structures/source_index")
        parts = [arr[p * K + a : p * K + b] for p, a, b in self._spans(start, stop)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def read_partition(self, p: int) -> StructureBatch:
        """The structures partition ``p`` stored (it must be done)."""
        p = int(p)
        if not self._is_done(p):
            raise StoreIncompleteError(f"{self.path}: partition {p} is not done")
        n = int(self._read("partitions/n_structures", p, p + 1)[0])
        return self._read_local(p, 0, n)[0]

    def arrays(self) -> dict[str, dict[str, Any]]:
        """Every array: ``{path: {shape, dtype, chunks}}``."""
        out: dict[str, dict[str, Any]] = {}

        def walk(group: zarr.Group, prefix: str) -> None:
            for name, node in group.members():
                key = f"{prefix}{name}"
                if key.startswith("parts/"):
                    continue
                if isinstance(node, zarr.Group):
                    walk(node, key + "/")
                else:
                    out[key] = {
                        "shape": list(node.shape),
                        "dtype": str(node.dtype),
                        "chunks": list(node.chunks),
                    }

        walk(self._root, "")
        return dict(sorted(out.items()))

    def info(self) -> dict[str, Any]:
        """Summary: counts, elements, completeness, skipped, arrays, source, config."""
        from ase.data import chemical_symbols

        done = self.done_partitions()
        skipped = self.skipped()
        return {
            "path": str(self.path),
            "format_version": self._meta["format_version"],
            "n_structures": self.n_structures,
            "n_atoms": self.n_atoms,
            "elements": [chemical_symbols[z] for z in self.elements],
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
