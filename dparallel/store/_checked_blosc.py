"""zarr's Blosc codec with the frame's length checked before it is decoded.

numcodecs' ``Blosc.decode`` trusts the compressed size in a frame's 16-byte header and
never compares it with the bytes it was given: a chunk cut short (a full disk, a crash,
an upload stopped, a hand) decoded without an error, into values read past its end (a
stored chunk of 11 ``int64`` cut to half read 8 bytes of this process's memory as atom
indices; training then failed deep in torch, ``IndexError: index out of range``), and a
compressed one cut by a byte decoded as if whole. Here a frame whose header does not
give its length is a ``ValueError``, which the store's reads name as a corrupt chunk of
its array (``StoreError``, docs/store-format.md "Done markers"). Installed as zarr's
``blosc`` implementation when this module is imported, unless the process chose another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import zarr
from zarr.codecs import BloscCodec
from zarr.registry import fully_qualified_name, register_codec

if TYPE_CHECKING:
    import numpy as np
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = ["CheckedBlosc", "check_frame", "install"]

#: A Blosc (1.x) frame's header: version, format, flags, type size, then four
#: little-endian uint32 (uncompressed size, block size, compressed size = frame length).
_HEADER = 16


def check_frame(frame: bytes | np.ndarray) -> None:
    """A ``ValueError`` unless ``frame`` is as long as its Blosc header says."""
    size = len(frame)
    stated = int.from_bytes(bytes(frame[12:_HEADER]), "little") if size >= _HEADER else -1
    if stated != size:
        raise ValueError(
            f"a Blosc frame of {size} bytes whose header says {max(stated, 0)}: cut short "
            "or not Blosc"
        )


class CheckedBlosc(BloscCodec):
    """:class:`~zarr.codecs.BloscCodec` that refuses a frame whose length is not the one
    its header gives (encoding and metadata unchanged)."""

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        check_frame(chunk_bytes.as_numpy_array())  # (n,) uint8
        return super()._decode_sync(chunk_bytes, chunk_spec)


def install() -> None:
    """Make :class:`CheckedBlosc` zarr's ``blosc`` codec, unless one other than zarr's own
    is configured."""
    name = fully_qualified_name(CheckedBlosc)
    register_codec("blosc", CheckedBlosc, qualname=name)
    if zarr.config.get("codecs.blosc") == fully_qualified_name(BloscCodec):
        zarr.config.set({"codecs.blosc": name})


install()
