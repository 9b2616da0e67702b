"""A store's writes: a partition's structures, features, arrays, skipped records and
done marker, per-atom arrays, and the client's summaries in the root attributes.

Every array is created at final shape by the client (:func:`create_store`); partition
``p`` owns whole chunks only (atom rows ``[p·A, (p+1)·A)``, structure rows
``[p·K, (p+1)·K)``, index ``p`` of the per-partition arrays, and the group ``parts/<p>``),
so processes write concurrently without locks. In a local store, what
:mod:`~dparallel.store._direct` writes exactly as zarr would goes straight to the files;
everything else, and everything in any other zarr store, goes through zarr's API (the
routes: :mod:`~dparallel.store._write_routes`).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from zarr.core.sync import sync

from dparallel._files import refuse_links, restore_in_place, sync_pending, write_file
from dparallel.errors import DiskFullError, StoreError, StoreMismatchError
from dparallel.store._derivatives import BLOCK_ATTRIBUTES, encode_pairs
from dparallel.store._dims import feature_dims, generic_dims
from dparallel.store._direct import direct_writes_available
from dparallel.store._layout import (
    _IDENTITY_ATTRS,
    _N_Z,
    _STRUCTURE_ARRAYS,
    CHUNK_KEYS,
    _compressors,
    _features_group,
    _index_reason_pairs,
    _jsonable,
    _partition_group,
)
from dparallel.store._opened import OpenedStore
from dparallel.store._write_routes import (
    files_below,
    make_groups,
    put_groups,
    put_rows,
    write_into_folder,
    write_rows_direct,
    write_through_zarr,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from dparallel.types import StructureBatch

__all__ = ["StoreWrites"]

log = logging.getLogger(__name__)

#: ``(group below parts/<p> or None, arrays by name, dimension names by array name)``
_GroupEntry = tuple[str | None, Mapping[str, np.ndarray], Mapping[str, "Sequence[str]"] | None]


class StoreWrites(OpenedStore):
    """The writing half of :class:`~dparallel.store.Store` (``mode="r+"``)."""

    def _direct_folder(self) -> Path | None:
        """The store's folder where the direct-file writes apply (a local store, with a
        zarr whose internals :mod:`~dparallel.store._direct` was tested against)."""
        local = self._backend.local
        return local if local is not None and direct_writes_available() else None

    def _batch_writes(self) -> bool:
        """Whether a task's writes go to a store at a URL as one batch of zarr's own keys
        (:mod:`~dparallel.store._batch`; zarr versions as for the direct writes)."""
        return self._backend.root is not None and direct_writes_available()

    def _writable_partition(self, p: int) -> int:
        """``p`` as an int, after checking it is a partition and the store is writable."""
        p = int(p)
        if not 0 <= p < self.n_partitions:
            raise StoreError(f"partition {p} outside [0, {self.n_partitions})")
        if self.mode == "r":
            raise StoreError(f"{self.location} is open read-only")
        local = self._backend.local
        if local is not None:  # never write or delete through a link in parts/<p>'s path
            refuse_links(local, local / _partition_group(p))
        return p

    # ------------------------------------------------------------ metadata
    def update_attrs(self, values: Mapping[str, Any]) -> None:
        """Add client-written summaries (e.g. ``statistics``) to the root attributes (only
        the client writes these: one writer); identity keys cannot be changed."""
        if self.mode == "r":
            raise StoreError(f"{self.location} is open read-only")
        clash = sorted(_IDENTITY_ATTRS & set(values))
        if clash:
            raise StoreError(f"attributes {clash} define the store and cannot be updated")
        meta = {**self._meta, **_jsonable(values)}
        local = self._backend.local
        if local is None:
            self._root.attrs["dparallel"] = meta
            self._meta = meta
            return
        document = local / "zarr.json"
        before = document.read_bytes()
        try:
            self._root.attrs["dparallel"] = meta
        except OSError as exc:
            # a full disk can leave zarr.json truncated (zarr wrote it in place), and a store
            # without its root document is no store at all: put the old one back (its freed
            # blocks are room) unless it is untouched (a read-only store); report the failure
            try:
                if not document.is_file() or document.read_bytes() != before:
                    try:
                        write_file(document, before, root=local, durable=True)
                    except DiskFullError:  # no room for a new one: the freed blocks
                        restore_in_place(document, before)
            except OSError:
                log.error("%s could not be restored; the store needs it", document)
            from dparallel._files import raise_if_disk_full  # zarr's error names no file

            raise_if_disk_full(exc, document, None)
            raise
        self._meta = meta

    # ---------------------------------------------------------- structures
    def write_structures(
        self, p: int, batch: StructureBatch, source_index: np.ndarray | None = None
    ) -> None:
        """Write partition ``p``'s (valid) structures into its slots, padding the rest.

        ``source_index`` (S,) gives each structure's index in the source file (default:
        the partition's range, i.e. nothing skipped). Rewrites the whole chunk, so a
        retried task overwrites what a failed attempt left.
        """
        p = self._writable_partition(p)
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
        self._write_rows(writes)

    def _write_rows(self, writes: Sequence[tuple[str, slice, np.ndarray]]) -> None:
        """``array[rows] = values`` for every ``(array name, rows, values)``, all at once.

        In a local store, rows that are exactly one chunk of numbers (a partition's slots)
        are encoded and written to their chunk file from this thread
        (:mod:`~dparallel.store._direct`), as is a chunk of strings that are all the fill
        value (removed, as zarr does); the rest (``tags`` that are set, everything in another
        zarr store) through zarr, opened and written concurrently in one call into its event
        loop (one after another, each open and write is a round trip).
        """
        folder = self._direct_folder()
        if folder is None and self._batch_writes():
            rest = sync(put_rows(self._backend.zarr_store, writes))
        else:
            rest = [job for job in writes if folder is None or not write_rows_direct(folder, *job)]
        if not rest:
            return
        root = self._root._async_group

        async def write(name: str, rows: slice, values: np.ndarray) -> None:
            try:
                array = await root.getitem(name)
            except KeyError:
                raise self._missing_array(name) from None
            if not isinstance(array, zarr.AsyncArray):
                raise StoreError(f"{self.location}: {name} is not an array")
            if values.dtype.kind not in "OUST":
                # a chunk of numbers is stored even if all fill (as the direct and batched
                # writes store it): a done partition's missing chunk is then damage
                array = array.with_config({"write_empty_chunks": True})
            await array.setitem(rows, values)

        async def write_all() -> None:
            await asyncio.gather(*(write(*job) for job in rest))

        sync(write_all())

    # ------------------------------------------------------------ partition state
    def record_skipped(self, records: Sequence[tuple[int, str]]) -> None:
        """Record skipped source structures ``(index, reason)`` in their partitions' groups.

        Each record goes to the partition owning that source index; call it only for the
        partitions this process writes (concurrency rule: one writer per partition).
        """
        by_part: dict[int, list[tuple[int, str]]] = {}
        for index, reason in records:
            by_part.setdefault(self.partition_of(int(index)), []).append((int(index), str(reason)))
        for p, recs in by_part.items():
            self._part_attributes.pop(p, None)
            g = self._partition_group(self._writable_partition(p), create=True)
            assert g is not None
            old = {int(i): str(r) for i, r in _index_reason_pairs(g.attrs.get("skipped"))}
            old.update(dict(recs))
            g.attrs["skipped"] = [[i, old[i]] for i in sorted(old)]

    def mark_done(self, p: int, report: Mapping[str, Any] | None = None) -> None:
        """Mark partition ``p`` done (last write of a task); ``report`` kept in ``parts/<p>``."""
        p = self._writable_partition(p)
        known = self._part_attributes.get(p)
        folder = self._direct_folder()
        if report is not None and known is not None:  # its document, put as it is now
            from dparallel.store import _batch

            known["report"] = _jsonable(report)
            key, document = _batch.group_item(_partition_group(p), known)
            if folder is not None:  # from this thread, as the direct writer wrote it
                write_file(folder.joinpath(*key.split("/")), document, root=folder, pending=True)
            else:
                sync(_batch.put_all(self._backend.zarr_store, ([(key, document)],)))
        elif report is not None:
            g = self._partition_group(p, create=True)
            assert g is not None
            g.attrs["report"] = _jsonable(report)
        if folder is not None:
            # what the marker declares is on disk first: the partition's files (those the
            # direct writer wrote, in one batch, and those zarr wrote), then the marker
            sync_pending(files_below(folder / _partition_group(p)))
        # the marker needs no sync: lost in a crash, the partition is computed again
        self._write_rows([("partitions/done", slice(p, p + 1), np.ones(1, np.uint8))])
        self._cum = None

    def clear_done(self, p: int) -> None:
        """Mark partition ``p`` not done (before re-running it): the marker's own chunk,
        written as :meth:`mark_done` writes it."""
        p = self._writable_partition(p)
        self._write_rows([("partitions/done", slice(p, p + 1), np.zeros(1, np.uint8))])
        self._cum = None

    # ------------------------------------------------------------ partition groups
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
        entries: list[_GroupEntry] = []
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
        self._write_groups(p, entries, attributes, replace="features")

    def _write_groups(
        self,
        p: int,
        entries: Sequence[_GroupEntry],
        attributes: Mapping[str, Mapping[str, Any]] | None = None,
        replace: str | None = None,
    ) -> None:
        """:meth:`write_partition_arrays` for several ``(group, arrays, dims)`` at once;
        ``attributes`` by group name, for groups made here; what the group ``replace``
        (below ``parts/<p>``) held is removed first.

        In a local store, numbers and booleans go straight to the files from this thread
        (:mod:`~dparallel.store._direct`: the documents and chunks zarr would write, made by
        zarr's own classes). Anything else (strings; everything in another zarr store) is
        written through zarr, concurrently in one call into its event loop, each array
        created from its own group.
        """
        p = self._writable_partition(p)
        part = _partition_group(p)
        names = list(dict.fromkeys(group for group, _, _ in entries if group))
        levels = list(
            dict.fromkeys(  # every level of every group, parents first
                "/".join(parts[:depth])
                for parts in (name.split("/") for name in names)
                for depth in range(1, len(parts) + 1)
            )
        )
        jobs = [
            (group, name, np.asarray(values), tuple((dims or {}).get(name, ())))
            for group, arrays, dims in entries
            for name, values in arrays.items()
        ]
        folder = self._direct_folder()
        store = self._backend.zarr_store
        local = self._backend.local
        if replace is not None and local is not None and (local / part / replace).exists():
            refuse_links(local, local / part / replace)
            shutil.rmtree(local / part / replace)  # as zarr's LocalStore.delete_dir, no loop
        elif replace is not None and local is None and not self._batch_writes():
            sync(store.delete_dir(f"{part}/{replace}"))
        new_part = False
        if folder is None and self._batch_writes():
            rest, new_part = sync(put_groups(store, part, levels, jobs, attributes or {}, replace))
        elif folder is None:
            groups = [part, *(f"{part}/{level}" for level in levels)]
            sync(make_groups(store, groups, attributes or {}, len(part) + 1))
            rest = jobs
        else:
            rest, new_part = write_into_folder(folder, part, levels, jobs, attributes or {})
        if new_part:  # its attributes are known: mark_done writes them with no read
            self._part_attributes[p] = {}
        if rest:
            sync(write_through_zarr(store, part, rest))

    # ------------------------------------------------------------ per-atom arrays
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
        """Write partition ``p``'s rows (n_atoms of p, *trailing) of ``atoms/<name>``: one
        chunk, by :meth:`_write_rows` (stored even if all fill: missing, it is damage)."""
        p = self._writable_partition(p)
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
        self._write_rows([(f"atoms/{name}", slice(p * A, (p + 1) * A), full)])
