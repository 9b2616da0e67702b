"""Zarr arrays, groups and chunks written straight to the files of a local store.

The documents are made by zarr's own classes and the chunks encoded by the numcodecs Blosc
that zarr's ``BloscCodec`` calls, from the calling thread (docs/store-format.md, "How a
task writes"); ``tests/store/test_direct.py`` compares them with zarr's own writes. Only
what is certain to match zarr is written here (:func:`writable`, :func:`write_chunk`);
every file goes through :mod:`dparallel._files`. These functions use zarr internals, so
they run only with the zarr versions they were tested against (:data:`TESTED_ZARR`):
:func:`direct_writes_available` is False, with one warning, for any other.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from numcodecs import Blosc
from zarr.codecs import BloscCodec

from dparallel._files import refuse_links, remove_file, write_file
from dparallel.store._chunks import own_codecs

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from zarr.core.metadata.v3 import ArrayV3Metadata

__all__ = [
    "TESTED_ZARR",
    "direct_writes_available",
    "group_document",
    "is_fill_chunk",
    "own_encoding",
    "read_array_metadata",
    "writable",
    "write_array",
    "write_chunk",
    "write_fill_chunk",
    "write_group",
]

log = logging.getLogger(__name__)

#: zarr releases ``[low, high)`` these writes were tested against (pyproject.toml pins it).
TESTED_ZARR = ((3, 1, 6), (3, 2, 0))

_METADATA = "zarr.json"
_SHUFFLE = {"noshuffle": Blosc.NOSHUFFLE, "shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE}
_NATIVE_ORDER = "<" if sys.byteorder == "little" else ">"


def direct_writes_available() -> bool:
    """Whether the running zarr is one these writes were tested against (and its internals
    import); False, with one warning, otherwise: the store then uses zarr's API only."""
    return _available(str(zarr.__version__))


def _release(version: str) -> tuple[int, ...] | None:
    """``"3.1.6"`` → ``(3, 1, 6)`` (missing parts 0, suffixes such as ``rc1`` ignored);
    ``None`` for what does not start with a number."""
    match = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    return None if match is None else tuple(int(n or 0) for n in match.groups())


@functools.cache
def _available(version: str) -> bool:
    """:func:`direct_writes_available` for zarr ``version`` (warns once per version)."""
    low, high = TESTED_ZARR
    release = _release(version)
    if release is not None and low <= release < high:
        try:
            _internals()
        except ImportError as exc:
            log.warning("zarr %s lacks what direct writes use (%s)", version, exc)
            return False
        return True
    log.warning(
        "zarr %s is outside the versions the store's direct writes were tested against "
        "(>=%s,<%s): writing through zarr's API instead (slower, same content)",
        version,
        ".".join(map(str, low)),
        ".".join(map(str, high)),
    )
    return False


@functools.cache
def _internals() -> Any:
    """The zarr internals these writes use, imported only where they were tested."""
    from types import SimpleNamespace

    from zarr.core.array import default_serializer_v3
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.chunk_grids import RegularChunkGrid
    from zarr.core.dtype import parse_dtype
    from zarr.core.group import GroupMetadata
    from zarr.core.metadata.v3 import ArrayV3Metadata

    return SimpleNamespace(
        default_serializer_v3=default_serializer_v3,
        default_buffer_prototype=default_buffer_prototype,
        RegularChunkGrid=RegularChunkGrid,
        parse_dtype=parse_dtype,
        GroupMetadata=GroupMetadata,
        ArrayV3Metadata=ArrayV3Metadata,
    )


def writable(values: np.ndarray, compressors: Any) -> bool:
    """Whether :func:`write_array` writes ``values`` with ``compressors`` exactly as zarr."""
    compressors = tuple(compressors or ())
    blosc_only = all(isinstance(c, BloscCodec) for c in compressors) and len(compressors) <= 1
    return blosc_only and _plain_numbers(values.dtype)


def write_group(
    directory: Path, attributes: Mapping[str, Any] | None = None, *, root: Path | None = None
) -> bool:
    """A zarr group at ``directory`` with ``attributes`` (JSON), unless a node is there;
    whether it was made here.

    ``root``: the store's folder, which no folder on the way may leave through a link."""
    if root is not None:
        refuse_links(root, directory)
    document = directory / _METADATA
    if document.exists():
        return False
    directory.mkdir(parents=True, exist_ok=True)
    write_file(document, group_document(attributes), pending=True)
    return True


def group_document(attributes: Mapping[str, Any] | None = None) -> bytes:
    """The ``zarr.json`` of a zarr group with ``attributes`` (JSON values), the bytes
    zarr's ``GroupMetadata`` writes, without its deep copy of the attributes
    (``dataclasses.asdict``: half of the ~6 ms a task's 140-kB report took)."""
    from zarr.core.config import config

    document = {"attributes": dict(attributes or {}), "zarr_format": 3, "node_type": "group"}
    return json.dumps(document, indent=config.get("json_indent"), allow_nan=True).encode()


def write_array(
    directory: Path,
    values: np.ndarray,
    compressors: Any,
    dims: Sequence[str],
    chunk_keys: Any,
    *,
    root: Path | None = None,
) -> None:
    """``values`` as a one-chunk zarr array at ``directory`` (replacing what is there).

    ``chunk_keys``: the chunk key encoding, as ``create_array(chunk_key_encoding=)`` takes it.
    The chunk is written before the metadata, so a write cut short leaves no array that
    reads as complete. Requires :func:`writable`. ``root``: as :func:`write_group`'s.
    """
    if root is not None:
        refuse_links(root, directory)
    z = _internals()
    values = np.asarray(values)
    dtype = _zarr_dtype(values.dtype)
    chunks = tuple(max(1, s) for s in values.shape)  # one chunk ((), for a scalar)
    meta = z.ArrayV3Metadata(
        shape=values.shape,
        data_type=dtype,
        chunk_grid=z.RegularChunkGrid(chunk_shape=chunks),
        chunk_key_encoding=chunk_keys,
        fill_value=dtype.default_scalar(),
        codecs=(z.default_serializer_v3(dtype), *tuple(compressors or ())),
        attributes={},
        dimension_names=tuple(dims) or None,  # as zarr: none for a scalar
    )
    if os.path.lexists(directory):
        shutil.rmtree(directory)  # refuses a link (rmtree never follows one)
    directory.mkdir(parents=True)
    if 0 not in values.shape:  # an empty array has no chunk
        written = write_chunk(directory, meta, (0,) * values.ndim, values)
        assert written, "writable() admitted an array write_chunk refuses"
    buffers = meta.to_buffer_dict(z.default_buffer_prototype())
    write_file(directory / _METADATA, buffers[_METADATA].to_bytes(), pending=True)


def read_array_metadata(directory: Path) -> ArrayV3Metadata | None:
    """The zarr 3 metadata of the array at ``directory``; None if it is not one.

    Kept per process for each document as it is on disk (path, inode, size, mtime): a
    featurize task reads the same dozen documents as every task before it."""
    document = directory / _METADATA
    try:
        stat = document.stat()
    except OSError:
        return None
    return _parsed_metadata(str(document), stat.st_ino, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _parsed_metadata(path: str, inode: int, size: int, mtime_ns: int) -> ArrayV3Metadata | None:
    """The array metadata in the document at ``path`` (the rest: its identity on disk)."""
    del inode, size, mtime_ns  # the cache key: a replaced document is read anew
    try:
        with open(path, "rb") as handle:
            document = json.loads(handle.read())
    except (OSError, ValueError):
        return None
    if document.get("zarr_format") != 3 or document.get("node_type") != "array":
        return None
    return _internals().ArrayV3Metadata.from_dict(document)


def own_encoding(meta: ArrayV3Metadata, values: np.ndarray) -> tuple[Any, ...] | None:
    """The codecs (:func:`~dparallel.store._chunks.own_codecs`) under which ``values``
    encode here as zarr would encode them as a chunk of ``meta``'s array: numbers of its
    dtype, little-endian where the bytes codec says an order; ``None`` otherwise."""
    codecs = own_codecs(meta)
    if codecs is None:
        return None
    if values.dtype != meta.data_type.to_native_dtype() or not _plain_numbers(values.dtype):
        return None
    endian = codecs[0].endian
    if values.dtype.itemsize > 1 and endian is not None and endian.value != "little":
        return None
    return codecs


def write_chunk(
    directory: Path,
    meta: ArrayV3Metadata,
    coords: Sequence[int],
    values: np.ndarray,
    *,
    root: Path | None = None,
) -> bool:
    """Write ``values`` as the whole chunk ``coords`` of the array at ``directory`` (with
    metadata ``meta``); False, nothing written, where this would not be zarr's encoding:
    a shape other than the chunk's, another dtype, or codecs other than bytes + blosc.
    ``root``: as :func:`write_group`'s."""
    codecs = own_encoding(meta, values)
    chunk_shape = getattr(meta.chunk_grid, "chunk_shape", None)
    if codecs is None or chunk_shape is None or tuple(chunk_shape) != values.shape:
        return False
    key = meta.encode_chunk_key(tuple(int(c) for c in coords))
    chunk = directory / key
    if root is not None:
        refuse_links(root, chunk.parent)
    if "/" in key:  # keys with folders (zarr's default separator)
        chunk.parent.mkdir(parents=True, exist_ok=True)
    write_file(chunk, _encoded(values, codecs), pending=True)
    return True


def is_fill_chunk(meta: ArrayV3Metadata, values: np.ndarray) -> bool:
    """Whether ``values`` are one whole chunk of ``meta``'s array and every one its fill
    value (strings included): zarr stores no such chunk."""
    chunk_shape = getattr(meta.chunk_grid, "chunk_shape", None)
    if chunk_shape is None or tuple(chunk_shape) != values.shape:
        return False
    return bool(np.all(values == meta.fill_value))


def write_fill_chunk(
    directory: Path,
    meta: ArrayV3Metadata,
    coords: Sequence[int],
    values: np.ndarray,
    *,
    root: Path | None = None,
) -> bool:
    """Chunk ``coords`` of strings (or any dtype) that are all the fill value: removed, as zarr
    does for such a chunk (it reads back as the fill value); False if ``values`` are not."""
    if not is_fill_chunk(meta, values):
        return False
    remove_file(directory / meta.encode_chunk_key(tuple(int(c) for c in coords)), root=root)
    return True


def _plain_numbers(dtype: np.dtype) -> bool:
    """Numbers or booleans stored in little-endian order (or single bytes)."""
    order = dtype.byteorder
    little = dtype.itemsize == 1 or order == "<" or (order == "=" and _NATIVE_ORDER == "<")
    return dtype.kind in "biuf" and little


@functools.lru_cache(maxsize=64)
def _zarr_dtype(dtype: np.dtype) -> Any:
    """zarr's data type for a numpy one (cached: its registry lookup is not cheap)."""
    return _internals().parse_dtype(dtype, zarr_format=3)


def _encoded(values: np.ndarray, codecs: Sequence[Any]) -> Any:
    """The chunk's bytes under ``codecs`` (bytes, then at most one blosc; as zarr encodes)."""
    raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    if len(codecs) == 1:
        return raw.data
    blosc = codecs[1]
    codec = Blosc(
        cname=blosc.cname.value,
        clevel=blosc.clevel,
        shuffle=_SHUFFLE[blosc.shuffle.value],
        blocksize=blosc.blocksize,
        typesize=blosc.typesize or values.dtype.itemsize,
    )
    return codec.encode(raw)
