"""Many small chunks read at once: the per-partition arrays (one chunk per partition) and
the partitions' group documents that ``info`` sums, and the chunks ``info --verify``
checks.

Through zarr, each chunk costs its async pipeline (~0.6 ms here; docs/store-format.md,
"What info costs"): 1,500 partitions took ~1 s per array. Here a local store's files are
read directly and any other store's objects requested concurrently (:data:`CONCURRENCY`
at a time), and a chunk of numbers behind zarr's bytes and Blosc codecs is decoded by
numcodecs' Blosc, as zarr decodes it (the frame's length checked first, as
:mod:`~dparallel.store._checked_blosc` does); other encodings return no decoder, and their
callers read through zarr.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np
from numcodecs import blosc
from zarr.codecs import BloscCodec, BytesCodec
from zarr.core.sync import sync
from zarr.storage import LocalStore

from dparallel.store._checked_blosc import check_frame

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from zarr.abc.store import Store as ZarrStore
    from zarr.core.metadata.v3 import ArrayV3Metadata

__all__ = ["CONCURRENCY", "chunk_decoder", "own_codecs", "read_keys"]

#: Requests in flight at once to a store that is not a folder (zarr's own default is 10).
CONCURRENCY = 64


def read_keys(store: ZarrStore, keys: Sequence[str]) -> list[bytes | None]:
    """The bytes under each of ``keys`` (``None`` where there is no such key): a folder's
    files read in this thread, any other store's objects requested concurrently."""
    if isinstance(store, LocalStore):
        root = str(store.root)
        return [_read_file(f"{root}/{key}") for key in keys]
    return sync(_gather(store, keys))


def _read_file(path: str) -> bytes | None:
    """A file's bytes, ``None`` where there is none (zarr's reading of a missing key)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


async def _gather(store: ZarrStore, keys: Sequence[str]) -> list[bytes | None]:
    from zarr.core.buffer import default_buffer_prototype

    prototype = default_buffer_prototype()
    slots = asyncio.Semaphore(CONCURRENCY)

    async def one(key: str) -> bytes | None:
        async with slots:
            buffer = await store.get(key, prototype)
        return None if buffer is None else buffer.to_bytes()

    return list(await asyncio.gather(*map(one, keys)))


def own_codecs(meta: ArrayV3Metadata) -> tuple[Any, ...] | None:
    """The codecs of the array ``meta`` describes where dparallel decodes and encodes its
    chunks itself: zarr's bytes codec and at most one Blosc after it; ``None`` for others."""
    codecs = tuple(meta.codecs)
    if not codecs or not isinstance(codecs[0], BytesCodec) or len(codecs) > 2:
        return None
    if len(codecs) == 2 and not isinstance(codecs[1], BloscCodec):
        return None
    return codecs


def chunk_decoder(meta: ArrayV3Metadata) -> Callable[[bytes], np.ndarray] | None:
    """A function decoding one whole chunk of the array ``meta`` describes, as zarr would
    (a ``ValueError`` for bytes that are not such a chunk); ``None`` for an encoding other
    than numbers behind zarr's bytes codec and at most one Blosc."""
    codecs = own_codecs(meta)
    if codecs is None:
        return None
    shape = getattr(meta.chunk_grid, "chunk_shape", None)
    dtype = meta.data_type.to_native_dtype()
    if shape is None or dtype.kind not in "biuf":
        return None
    endian = codecs[0].endian
    if dtype.itemsize > 1:
        dtype = dtype.newbyteorder("<" if endian is None or endian.value == "little" else ">")
    compressed = len(codecs) == 2
    shape = tuple(int(n) for n in shape)

    def decode(data: bytes) -> np.ndarray:
        if compressed:
            check_frame(data)
            data = blosc.decompress(data)
        return np.frombuffer(data, dtype).reshape(shape)

    return decode
