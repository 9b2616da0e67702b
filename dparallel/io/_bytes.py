"""The bytes of a structure file wherever it is: local, remote (ranged reads), gzipped.

An uncompressed file is read by byte range: ``pread``-like for a local file, one ranged
GET for a URL, so a task reads only its partition's bytes. A ``.gz`` file has no random
access: it is decompressed whole, once per process (the last one is kept in memory), and
the index's byte offsets are offsets into the decompressed text. That suits files up to
a few GB per worker; ship larger data sets uncompressed (docs/io.md).
"""

from __future__ import annotations

import gzip
import io
import threading
from typing import TYPE_CHECKING, BinaryIO

from dparallel.errors import InputFormatError

if TYPE_CHECKING:
    from dparallel.io.location import Location

__all__ = ["is_gzip", "open_stream", "read_range"]

_LOCK = threading.Lock()
_LAST: dict[tuple[str, int, int], bytes] = {}  # (url, size, mtime_ns) → decompressed


def is_gzip(location: Location) -> bool:
    """Whether the file is gzipped (by its name: ``….gz``)."""
    return location.name.lower().endswith(".gz")


def _decompressed(location: Location) -> bytes:
    """The whole decompressed text of a ``.gz`` file (kept for the next call)."""
    info = location.info()
    key = (location.url, int(info["size"]), int(info["mtime_ns"]))
    with _LOCK:
        if key in _LAST:
            return _LAST[key]
        with location.open("rb") as raw:
            try:
                data = gzip.decompress(raw.read())
            except (OSError, EOFError) as exc:
                raise InputFormatError(
                    f"not a readable gzip file: {exc}", path=str(location)
                ) from None
        _LAST.clear()
        _LAST[key] = data
        return data


def open_stream(location: Location) -> BinaryIO:
    """The file's (decompressed) bytes from the start, as a binary file object."""
    if is_gzip(location):
        return io.BytesIO(_decompressed(location))
    if location.local is not None:
        return location.open("rb")
    # an fsspec file splits lines in Python, a buffered reader over it in C (docs/io.md)
    return io.BufferedReader(location.open("rb"), buffer_size=1 << 22)


def read_range(location: Location, start: int, stop: int) -> bytes:
    """Bytes ``[start, stop)`` of the (decompressed) file."""
    if is_gzip(location):
        return _decompressed(location)[start:stop]
    return location.read_range(start, stop)
