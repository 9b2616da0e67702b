"""An opened store: its zarr root and metadata, partition geometry and done markers.

The base of :class:`~dparallel.store.Store`: what both its writes
(:mod:`~dparallel.store._writes`) and its reads (:mod:`~dparallel.store._reads`) use.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import zarr

from dparallel.errors import StoreError
from dparallel.io.location import Location, as_location
from dparallel.store._backend import StoreTarget, open_backend
from dparallel.store._chunks import chunk_decoder, read_keys
from dparallel.store._generations import POINTER_KEY, is_generation
from dparallel.store._layout import (
    CHUNK_KEYS,
    FORMAT_VERSION,
    READABLE_FORMATS,
    ZARR3,
    _partition_group,
    made_by,
    remake_advice,
    repair_advice,
)
from dparallel.store._read_cache import CachedReads, cache_budget
from dparallel.store.plan import Plan

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

    from zarr.abc.store import Store as ZarrStore

__all__ = ["OpenedStore"]


def _all_fill(values: np.ndarray, array: zarr.Array) -> bool:
    """Whether every element of ``values`` equals ``array``'s fill value (NaN as NaN)."""
    fill: Any = array.metadata.fill_value
    if values.dtype.kind in "OUT":
        return False  # strings: an all-empty chunk is removed, as zarr does (not damage)
    nan = values.dtype.kind == "f" and bool(np.isnan(fill))

    def all_fill(part: np.ndarray) -> bool:
        return bool(np.isnan(part).all()) if nan else bool((part == fill).all())

    # a sample first: data read back is almost never all fill, and this is on every read
    flat = values.reshape(-1)
    return all_fill(flat[:: max(1, flat.size // 64)]) and all_fill(flat)


log = logging.getLogger(__name__)
#: The per-partition done markers (one chunk each, written last by a task).
_DONE = "partitions/done"


class OpenedStore:
    """A dparallel zarr store opened for reading (``mode="r"``) or writing (``"r+"``).

    ``store``: a path (a local store), a URL (or a :class:`~dparallel.io.location.Location`)
    or a zarr ``Store`` (see :mod:`~dparallel.store._backend`); a URL opens at its current
    generation, ``direct``: at exactly that URL. Picklable (the path, the generation's
    location, or the zarr store, and the mode), so a task can receive it and write its
    own partition.
    """

    def __init__(
        self, store: StoreTarget, mode: Literal["r", "r+"] = "r", *, direct: bool = False
    ) -> None:
        backend = open_backend(store, mode, direct=direct)
        cache = None
        if backend.root is not None and mode == "r" and cache_budget() > 0:
            cache = CachedReads(backend.zarr_store, cache_budget())
            backend = replace(backend, zarr_store=cache)
        self._backend = backend
        self.location = backend.location
        self.mode = mode
        if backend.local is not None and not (backend.local / "zarr.json").is_file():
            raise StoreError(f"no zarr store at {backend.local}")
        try:
            self._root = zarr.open_group(store=backend.zarr_store, mode=mode, **ZARR3)
        except FileNotFoundError:
            root = backend.root
            if root is not None and root != backend.location and is_generation(root.name):
                raise StoreError(
                    f"{self.location}: its pointer ({POINTER_KEY}) names the generation "
                    f"{root.name}, which holds no store (deleted behind dparallel's back): "
                    f"the store is lost; remove {self.location} and make it again (the "
                    "ingest or featurize that made it)"
                ) from None
            raise StoreError(f"no zarr store at {self.location}") from None
        except ValueError as exc:  # its zarr.json cut short or not JSON
            raise StoreError(
                f"{self.location}: its zarr.json cannot be read ({type(exc).__name__}: {exc}); "
                "a damaged store, no longer provably one, which --overwrite does not replace: "
                "remove it and make it again (the ingest or featurize that made it)"
            ) from None
        meta = self._root.attrs.get("dparallel")
        if not isinstance(meta, dict):
            raise StoreError(f"{self.location} is a zarr group but not a dparallel store")
        version = meta.get("format_version")
        if version not in READABLE_FORMATS or (mode != "r" and version != FORMAT_VERSION):
            how = "reads" if version not in READABLE_FORMATS else "writes"
            command = made_by(meta)
            raise StoreError(
                f"{self.location} has store format {version}, this dparallel {how} format "
                f"{FORMAT_VERSION}; {command} it again (dparallel {command} … --overwrite)"
            )
        self._meta = meta
        self._starts = np.asarray(meta["plan"]["starts"], np.int64)  # (P,)
        self._stops = np.asarray(meta["plan"]["stops"], np.int64)  # (P,)
        self._cum: np.ndarray | None = None  # (P + 1,) see _cumulative
        self._cum_done: np.ndarray | None = None  # (P,) the done flags _cum counted
        self._unreadable_done: set[int] = set()  # partitions whose done marker is torn
        #: attributes of the ``parts/<p>`` documents this object made (batched writes)
        self._part_attributes: dict[int, dict[str, Any]] = {}
        if cache is not None and not self.is_complete:  # may still change: read afresh
            self._backend = replace(backend, zarr_store=cache.unwrapped())
            self._root = zarr.open_group(store=self._backend.zarr_store, mode=mode, **ZARR3)

    def __getstate__(self) -> dict[str, Any]:
        backend = self._backend
        if backend.root is not None:  # the generation itself, even if another is current
            return {"path": backend.root, "mode": self.mode, "direct": True}
        target = str(backend.local) if backend.local is not None else backend.zarr_store
        return {"path": target, "mode": self.mode}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["mode"], direct=state.get("direct", False))  # type: ignore[misc]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.location!r}, mode={self.mode!r}, "
            f"partitions={self.n_partitions})"
        )

    # ------------------------------------------------------------ where
    @property
    def path(self) -> Path:
        """The store's folder; a :class:`StoreError` for a store that is not local."""
        local = self._backend.local
        if local is None:
            raise StoreError(
                f"{self.location} is not a local store: it has no path (use .target, .root)"
            )
        return local

    @property
    def target(self) -> Location:
        """Where the user named the store: its folder or its URL."""
        backend = self._backend
        if backend.target is not None:
            return backend.target
        return as_location(backend.local if backend.local is not None else self.location)

    @property
    def ref(self) -> str | Location:
        """What a task reopens to write this very store: its folder, or its generation."""
        backend = self._backend
        if backend.root is not None:
            return backend.root
        return str(self.path)

    @property
    def root(self) -> Location | None:
        """For a store at a URL, where its zarr group is (its generation); else ``None``."""
        return self._backend.root

    @property
    def is_local(self) -> bool:
        """Whether the store is a folder (a :class:`zarr.storage.LocalStore`)."""
        return self._backend.local is not None

    @property
    def zarr_store(self) -> ZarrStore:
        """The zarr ``Store`` every read and write goes through."""
        return self._backend.zarr_store

    # ------------------------------------------------------------ metadata
    @property
    def attrs(self) -> dict[str, Any]:
        """The ``dparallel`` root attributes (versions, source, config, plan, slots)."""
        return dict(self._meta)

    @property
    def made_by(self) -> str:
        """The command that makes (and finishes, and remakes) this store: ``featurize``,
        or ``ingest`` for a store of structures only."""
        return made_by(self._meta)

    @property
    def remake(self) -> str:
        """The fix for a damaged store, to end its errors with: the command that made it."""
        return remake_advice(self.made_by)

    @property
    def repair(self) -> str:
        """The fix for damage ``info --verify`` finds, to end its errors with: the command
        that made the store, with ``--repair``, computes the damaged partitions again (and
        says to make the store again where no partition owns the damage)."""
        return f"{repair_advice(self.made_by)} (`dparallel info {self.target} --verify` lists them)"

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

    # ------------------------------------------------------------ arrays
    def _array(self, name: str) -> zarr.Array:
        with self._decoding(name):  # its zarr.json cut short: named
            try:
                node = self._root[name]
            except KeyError:
                raise self._missing_array(name) from None
        if not isinstance(node, zarr.Array):
            raise StoreError(f"{self.location}: {name} is not an array")
        return node

    def _read(self, name: str, start: int | None = None, stop: int | None = None) -> np.ndarray:
        """Rows ``[start, stop)`` of array ``name`` as numpy (all of it by default).

        Raises :class:`StoreError` naming the array when a chunk cannot be decoded (a file
        truncated by a full disk or a crash, or corrupted otherwise).
        """
        return self._rows(name, self._array(name), start, stop)

    def _rows(
        self, name: str, array: zarr.Array, start: int | None, stop: int | None
    ) -> np.ndarray:
        """Rows ``[start, stop)`` of ``array`` (named ``name`` in errors) as numpy."""
        with self._decoding(name):
            return np.asarray(array[start:stop])

    def _missing_array(self, name: str) -> StoreError:
        """The error for array ``name`` gone from the store (its ``zarr.json`` deleted)."""
        return StoreError(
            f"{self.location}: {name} is missing (its zarr.json was deleted?); a damaged "
            f"store: {self.repair}"
        )

    def _read_written(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of ``name`` that a done partition wrote (one chunk or
        whole chunks): as :meth:`_read`, and a :class:`StoreError` where they read as the
        fill value because their chunk is gone (zarr reads a missing chunk as fill)."""
        array = self._array(name)
        values = self._rows(name, array, start, stop)
        if stop > start and _all_fill(values, array):
            size = array.chunks[0]
            self._require_chunks(name, array, range(start // size, (stop - 1) // size + 1))
        return values

    def _read_done_rows(self, name: str, done: np.ndarray) -> np.ndarray:
        """A per-partition array (one chunk per partition) read whole, with a
        :class:`StoreError` where a partition marked in ``done`` (the caller's
        :meth:`_done_flags`) reads as fill because its chunk is gone, or where its chunk
        cannot be decoded."""
        array = self._array(name)
        read = self._partition_chunks(name, array)
        if read is None:  # an encoding read through zarr, chunk by chunk
            values = self._rows(name, array, None, None)
            self._require_chunks(
                name, array, [int(p) for p in np.flatnonzero(done) if _all_fill(values[p], array)]
            )
            return values
        values, missing, unreadable = read
        for p, why in unreadable.items():
            if done[p]:
                raise StoreError(
                    f"{self.location}: cannot read {name} (a chunk or its metadata is "
                    f"truncated or corrupt: {why}); {self.repair}"
                )
        if self._meta.get("every_chunk_written"):
            for p in missing:
                if done[p]:
                    raise self._missing_chunk(name, array, p)
        return values

    def _partition_chunks(
        self, name: str, array: zarr.Array
    ) -> tuple[np.ndarray, list[int], dict[int, str]] | None:
        """A per-partition array read whole from all its chunks at once
        (:mod:`~dparallel.store._chunks`): ``(values, partitions whose chunk is missing,
        {partition: why its chunk cannot be decoded})``, fill values in both; ``None``
        where it is not one chunk per partition of numbers zarr stores as bytes + Blosc."""
        meta = array.metadata
        decode = chunk_decoder(meta)  # type: ignore[arg-type]
        if decode is None or array.ndim == 0 or array.chunks != (1, *array.shape[1:]):
            return None
        trailing = (0,) * (array.ndim - 1)
        keys = [meta.encode_chunk_key((p, *trailing)) for p in range(array.shape[0])]
        where = array.store_path
        found = read_keys(where.store, [f"{where.path}/{key}" for key in keys])
        values = np.full(array.shape, meta.fill_value, dtype=meta.data_type.to_native_dtype())  # type: ignore[union-attr]
        missing: list[int] = []
        unreadable: dict[int, str] = {}
        for p, data in enumerate(found):
            if data is None:
                missing.append(p)
                continue
            try:
                values[p] = decode(data)[0]
            except Exception as exc:  # noqa: BLE001 - codec errors come in many types
                unreadable[p] = f"{keys[p]}: {type(exc).__name__}: {exc}"
        return values, missing, unreadable

    def _read_whole(self, name: str, array: zarr.Array) -> np.ndarray:
        """A partition group's array (written whole, its chunk before its metadata), with a
        :class:`StoreError` where it reads as fill because a chunk is gone."""
        values = np.asarray(array[...])
        if values.size and _all_fill(values, array):
            self._require_chunks(name, array, range(array.cdata_shape[0]))
        return values

    def _require_chunks(self, name: str, array: zarr.Array, chunks: Iterable[int]) -> None:
        """Raise :class:`StoreError` naming the first of ``chunks`` (leading chunk indices)
        whose object is missing."""
        from zarr.core.sync import sync

        if not self._meta.get("every_chunk_written"):
            return  # an older store: an all-fill chunk was left out when it was written
        trailing = (0,) * (array.ndim - 1)
        for i in chunks:
            key = array.metadata.encode_chunk_key((int(i), *trailing))
            if not sync(array.store_path.store.exists(f"{array.store_path.path}/{key}")):
                raise self._missing_chunk(name, array, int(i))

    def _missing_chunk(self, name: str, array: zarr.Array, i: int) -> StoreError:
        """The error for leading chunk ``i`` of array ``name``, gone from a done partition."""
        key = array.metadata.encode_chunk_key((i, *(0,) * (array.ndim - 1)))
        return StoreError(
            f"{self.location}: {name}: chunk {key} of a done partition is missing "
            "(deleted or lost after it was written; zarr would read fill values): "
            f"{self.repair}"
        )

    @contextlib.contextmanager
    def _decoding(self, name: str) -> Iterator[None]:
        """Reads of ``name`` inside the block: a chunk or document that cannot be decoded
        (truncated by a full disk or a crash, or corrupted otherwise) is a
        :class:`StoreError` naming it, not the codec's or the JSON parser's traceback."""
        try:
            yield
        except (OSError, MemoryError, StoreError):
            raise
        except Exception as exc:  # noqa: BLE001 - codec errors come in many types
            raise StoreError(
                f"{self.location}: cannot read {name} (a chunk or its metadata is truncated "
                f"or corrupt: {type(exc).__name__}: {exc}); {self.repair}"
            ) from None

    def _partition_group(self, p: int, create: bool) -> zarr.Group | None:
        """The group ``parts/<p>``; made if ``create``, else ``None`` where it is not."""
        key = _partition_group(p)
        if key in self._root:
            return self._root[key]  # type: ignore[return-value]
        if not create:
            return None
        return zarr.open_group(store=self._backend.zarr_store, path=key, mode="a", **ZARR3)

    # ---------------------------------------------------------- completion
    def _done_flags(self) -> np.ndarray:
        """(P,) bool done markers; a marker that cannot be read counts as not done.

        Each partition's marker is its own chunk, written last: one torn by a crash or a
        full disk means the partition's task did not finish, and a rerun redoes it.
        """
        name = _DONE
        array = self._array(name)
        read = self._partition_chunks(name, array)
        if read is None:  # an encoding read through zarr
            try:
                return self._rows(name, array, None, None).astype(bool)
            except StoreError:
                return np.asarray([self._is_done(p) for p in range(self.n_partitions)], bool)
        values, _, unreadable = read
        flags = values.astype(bool)
        for p in unreadable:
            flags[p] = False
            self._warn_unreadable_done(p)
        return flags

    def is_done(self, p: int) -> bool:
        """Whether partition ``p`` is marked done: where it is not (its marker's object is
        absent, the common case for a task about to compute it), one request (a HEAD)."""
        from zarr.core.sync import sync

        where = self._root.store_path
        key = "/".join(filter(None, (where.path, _DONE, CHUNK_KEYS.encode_chunk_key((int(p),)))))
        return bool(sync(where.store.exists(key))) and self._is_done(int(p))

    def _is_done(self, p: int) -> bool:
        """Partition ``p``'s done marker (unreadable: not done, see :meth:`_done_flags`)."""
        try:
            return bool(self._read(_DONE, p, p + 1)[0])
        except StoreError:
            self._warn_unreadable_done(p)
            return False

    def _warn_unreadable_done(self, p: int) -> None:
        """One warning per partition whose done marker cannot be read."""
        if p not in self._unreadable_done:
            self._unreadable_done.add(p)
            log.warning("%s: the done marker of partition %d is unreadable", self.location, p)

    def done_partitions(self) -> np.ndarray:
        """Indices (int64, sorted) of the partitions marked done."""
        return np.flatnonzero(self._done_flags()).astype(np.int64)

    def pending_partitions(self) -> np.ndarray:
        """Indices (int64, sorted) of the partitions not yet done."""
        return np.flatnonzero(~self._done_flags()).astype(np.int64)

    @property
    def is_complete(self) -> bool:
        """True when every partition is done."""
        return len(self.done_partitions()) == self.n_partitions
