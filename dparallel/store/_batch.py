"""A task's writes to a store at a URL: zarr's own keys and bytes, put in one batch.

The documents and chunks :mod:`~dparallel.store._direct` makes, put concurrently: chunks
before the metadata that makes an array readable, the done marker still last
(docs/store-format.md, "How a task writes there"). What cannot be encoded so goes through
zarr's API.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.store._direct import (
    _encoded,
    _internals,
    _zarr_dtype,
    group_document,
    is_fill_chunk,
    own_encoding,
    writable,
)
from dparallel.store._generations import is_generation

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from zarr.abc.store import Store as ZarrStore
    from zarr.core.metadata.v3 import ArrayV3Metadata

__all__ = [
    "array_items",
    "chunk_item",
    "fill_chunk_key",
    "group_item",
    "keys_below",
    "put_all",
    "slot_metadata",
    "started_put",
]

_METADATA = "zarr.json"

#: ``(key, bytes)`` to put, in order of phases (chunks, then documents).
Item = tuple[str, bytes]


def group_item(path: str, attributes: Mapping[str, Any] | None = None) -> Item:
    """The ``zarr.json`` of a group at ``path`` with ``attributes``."""
    return f"{path}/{_METADATA}", group_document(attributes)


def array_items(
    path: str, values: np.ndarray, compressors: Any, dims: Sequence[str], chunk_keys: Any
) -> tuple[list[Item], Item] | None:
    """A one-chunk array at ``path``: ``([chunk], metadata)``; ``None`` where it is not
    :func:`~dparallel.store._direct.writable` (the caller uses zarr's API)."""
    values = np.asarray(values)
    if not writable(values, compressors):
        return None
    z = _internals()
    dtype = _zarr_dtype(values.dtype)
    meta = z.ArrayV3Metadata(
        shape=values.shape,
        data_type=dtype,
        chunk_grid=z.RegularChunkGrid(chunk_shape=tuple(max(1, s) for s in values.shape)),
        chunk_key_encoding=chunk_keys,
        fill_value=dtype.default_scalar(),
        codecs=(z.default_serializer_v3(dtype), *tuple(compressors or ())),
        attributes={},
        dimension_names=tuple(dims) or None,
    )
    chunks = []
    if 0 not in values.shape:
        key = meta.encode_chunk_key((0,) * values.ndim)
        chunks.append((f"{path}/{key}", bytes(_encoded(values, tuple(meta.codecs)))))
    document = meta.to_buffer_dict(z.default_buffer_prototype())[_METADATA].to_bytes()
    return chunks, (f"{path}/{_METADATA}", document)


def _chunk_key(path: str, meta: ArrayV3Metadata, rows: slice, values: np.ndarray) -> str | None:
    """The key of the one chunk that ``rows`` (``values``) of the array at ``path`` are
    exactly; ``None`` where they are not one whole chunk."""
    chunk_shape = getattr(meta.chunk_grid, "chunk_shape", None)
    start, stop = rows.start or 0, rows.stop
    if chunk_shape is None or rows.step not in (None, 1) or stop is None or not values.ndim:
        return None
    if start % chunk_shape[0] or tuple(chunk_shape) != values.shape:
        return None
    coords = (start // chunk_shape[0], *([0] * (values.ndim - 1)))
    return f"{path}/{meta.encode_chunk_key(coords)}"


def chunk_item(path: str, meta: ArrayV3Metadata, rows: slice, values: np.ndarray) -> Item | None:
    """``rows`` of the array at ``path`` as its chunk, if they are exactly one chunk of
    numbers encoded with bytes + at most one blosc; else ``None``."""
    codecs = own_encoding(meta, values)
    key = None if codecs is None else _chunk_key(path, meta, rows, values)
    return None if codecs is None or key is None else (key, bytes(_encoded(values, codecs)))


def fill_chunk_key(path: str, meta: ArrayV3Metadata, rows: slice, values: np.ndarray) -> str | None:
    """The key of the chunk ``rows`` are, if every value is the fill value (strings
    included): zarr stores no such chunk, so it is deleted; else ``None``."""
    key = _chunk_key(path, meta, rows, values)
    return key if key is not None and is_fill_chunk(meta, values) else None


@functools.lru_cache(maxsize=512)
def _parsed(document: bytes) -> ArrayV3Metadata:
    import json

    return _internals().ArrayV3Metadata.from_dict(json.loads(document))


#: Metadata of the shared arrays of generations, by key: a generation's ``structures/`` and
#: ``partitions/`` arrays are made once, with it, so a process reads each document once.
_GENERATION_SLOTS: dict[str, ArrayV3Metadata] = {}


async def slot_metadata(store: ZarrStore, path: str) -> ArrayV3Metadata | None:
    """The metadata of the shared array at ``path`` (one GET, none again in a generation)."""
    root = _prefix(store)
    key = f"{root}/{path}" if is_generation(root.rstrip("/").rsplit("/", 1)[-1]) else None
    if key in _GENERATION_SLOTS:
        return _GENERATION_SLOTS[key]
    buffer = await store.get(f"{path}/{_METADATA}", _internals().default_buffer_prototype())
    if buffer is None:
        return None
    meta = _parsed(buffer.to_bytes())
    if key is not None:
        _GENERATION_SLOTS[key] = meta
    return meta


def _prefix(store: ZarrStore) -> str:
    """Where ``store`` is in its bucket or filesystem: the generation for a store at one."""
    inner: Any = getattr(store, "store", None)  # zarr's ObjectStore: obstore's, its prefix
    if getattr(inner, "prefix", None) is not None:
        return f"{inner.config.get('bucket', '')}/{inner.prefix}"
    return str(getattr(store, "path", ""))


async def keys_below(store: ZarrStore, prefix: str) -> list[str]:
    """Every key below ``prefix`` (a folder, ``…/``): one listing request on object storage
    (through fsspec, zarr's ``list_prefix`` asks the filesystem's ``find``, which for some,
    s3fs among them, probes the prefix as an object and lists it again when it holds
    nothing)."""
    from zarr.storage import FsspecStore

    if not isinstance(store, FsspecStore):
        return [key async for key in store.list_prefix(prefix)]
    parent, _, name = f"{store.path}/{prefix}".rstrip("/").rpartition("/")
    found = await store.fs._find(parent, prefix=f"{name}/", withdirs=False)
    return [key.removeprefix(f"{store.path}/") for key in found]


async def put_all(store: ZarrStore, phases: Iterable[Sequence[Item]]) -> None:
    """Put each phase's items concurrently, phase after phase."""
    for items in phases:
        await asyncio.gather(*map(started_put(store), items))


def started_put(store: ZarrStore) -> Callable[[Item], asyncio.Future[None]]:
    """A function that starts putting an item into ``store`` now (not when awaited): what is
    encoded next overlaps what is on its way."""
    from zarr.core.buffer import cpu

    def start(item: Item) -> asyncio.Future[None]:
        return asyncio.ensure_future(store.set(item[0], cpu.Buffer.from_bytes(item[1])))

    return start
