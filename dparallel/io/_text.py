"""The bytes of a structure file wherever it is: local, remote (ranged reads), compressed.

An uncompressed file is read by byte range: ``pread``-like for a local file, one ranged
GET for a URL, so a task reads only its partition's bytes. A ``.gz``, ``.bz2`` or ``.xz``
file has no random access: an index's byte ranges are ranges of the decompressed text.
It is indexed in one streaming pass (:func:`open_stream`: a block of text held at a
time), and a read near its start decompresses only that far, so the process that opens
it holds no copy of the text; a worker reading a partition decompresses it whole, once
per process (the last one is kept in memory). That suits files up to a few GB per
worker; ship larger data sets uncompressed (docs/io.md).
"""

from __future__ import annotations

import bz2
import functools
import gzip
import hashlib
import io
import lzma
import threading
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from dparallel.errors import InputFormatError
from dparallel.io.location import READ_BLOCK

if TYPE_CHECKING:
    from collections.abc import Callable

    from dparallel.io.location import Location

__all__ = [
    "COMPRESSIONS",
    "SAMPLE_BYTES",
    "compression",
    "open_stream",
    "read_range",
    "sample_hash",
    "stream_sample_hash",
]

#: Bytes of text at each end that :func:`sample_hash` reads.
SAMPLE_BYTES = 1 << 20
_LOCK = threading.Lock()
_LAST: dict[tuple[str, int, int], bytearray] = {}  # (url, size, mtime_ns) → decompressed

#: Name endings of the compressed files dparallel reads (as ASE does) → their kind.
COMPRESSIONS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}
_UNREADABLE = (OSError, EOFError, ValueError, lzma.LZMAError)  # what a damaged file raises


def compression(location: Location | str) -> str | None:
    """The file's compression suffix (``.gz``, ``.bz2``, ``.xz``) by its name (a
    location's, or a name given as such), else None."""
    name = (location if isinstance(location, str) else location.name).lower()
    return next((suffix for suffix in COMPRESSIONS if name.endswith(suffix)), None)


def _key(location: Location) -> tuple[str, int, int]:
    """What a decompressed text is kept under: the file's URL, size and mtime."""
    info = location.info()
    return location.url, int(info["size"]), int(info["mtime_ns"])


def _decompressed(location: Location) -> bytearray:
    """The whole decompressed text of a compressed file (kept for the next call), grown a
    block at a time: ~1.1x the text at its peak (decompressing it in one call took 2.7x)."""
    key = _key(location)
    with _LOCK:
        if key in _LAST:
            return _LAST[key]
        _LAST.clear()  # the last one goes first
        data = bytearray()
        with open_stream(location) as f:
            while block := f.read(READ_BLOCK):
                data += block
        _LAST[key] = data
        return data


def _unreadable(kind: str, exc: BaseException, location: Location) -> InputFormatError:
    return InputFormatError(f"not a readable {kind} file: {exc}", path=str(location))


def _decompressing(suffix: str, raw: BinaryIO) -> io.BufferedIOBase:
    """The standard library's reader that decompresses the file object ``raw`` as read."""
    if suffix == ".gz":
        return gzip.GzipFile(fileobj=raw)
    return bz2.BZ2File(raw) if suffix == ".bz2" else lzma.LZMAFile(raw)


class _Watched:
    """A compressed file's byte stream whose own read errors are remembered (``failed``):
    a dropped connection to a remote file is the source's failure, not damaged data."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.failed: OSError | None = None

    def read(self, n: int = -1) -> bytes:
        try:
            return self.raw.read(n)
        except OSError as exc:
            self.failed = exc
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


class _Inflating(io.RawIOBase):
    """A compressed file's text, decompressed as it is read front to back (no seeking);
    keeps its first and last :data:`SAMPLE_BYTES` for the sample hash (:meth:`kept`)."""

    def __init__(self, location: Location) -> None:
        suffix = compression(location) or ".gz"
        self._kind, self._location = COMPRESSIONS[suffix], location
        self._raw = _Watched(location.open())
        self._text = _decompressing(suffix, cast("BinaryIO", self._raw))
        self._head, self._tail, self._read = bytearray(), bytearray(), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            n = self._text.readinto(buffer)
        except _UNREADABLE as exc:
            if self._raw.failed is not None:  # reading the file failed (a network), as is
                raise self._raw.failed from None
            raise _unreadable(self._kind, exc, self._location) from None
        got = memoryview(buffer)[:n]
        if len(self._head) < SAMPLE_BYTES:
            self._head += got[: SAMPLE_BYTES - len(self._head)]
        self._tail += got
        if len(self._tail) > 2 * SAMPLE_BYTES:
            del self._tail[:-SAMPLE_BYTES]
        self._read += n
        return n

    def kept(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of the text from what was kept (else streamed again)."""
        if stop <= len(self._head):
            return bytes(self._head[start:stop])
        tail_start = self._read - len(self._tail)
        if tail_start <= start and stop <= self._read:
            return bytes(self._tail[start - tail_start : stop - tail_start])
        return _stream_range(self._location, start, stop)

    def close(self) -> None:
        if not self.closed:
            self._text.close()
            self._raw.close()
        super().close()


def _stream_range(location: Location, start: int, stop: int) -> bytes:
    """Bytes ``[start, stop)`` of a compressed file's text, decompressed up to ``stop``."""
    with open_stream(location) as f:
        skip = start
        while skip > 0:  # a block at a time
            got = len(f.read(min(skip, READ_BLOCK)))
            if not got:
                return b""
            skip -= got
        return f.read(max(stop - start, 0))


def open_stream(location: Location) -> BinaryIO:
    """The file's (decompressed) bytes from the start, as a binary file object (a
    compressed file's decompressed as it is read: it cannot seek)."""
    if compression(location):
        return cast("BinaryIO", io.BufferedReader(_Inflating(location), buffer_size=READ_BLOCK))
    if location.local is not None:
        return location.open()
    # a remote file's lines are split by a buffered reader over it, in C (docs/io.md)
    return io.BufferedReader(location.open(), buffer_size=READ_BLOCK)


def read_range(location: Location, start: int, stop: int) -> bytes:
    """Bytes ``[start, stop)`` of the (decompressed) file: of a compressed one, from the
    text this process keeps, else by decompressing as far as ``stop`` where that is within
    :data:`READ_BLOCK` (the first structure's labels, read where a source is opened: that
    process keeps no text), else by decompressing it whole (kept for the next read)."""
    if compression(location):
        with _LOCK:
            kept = _LAST.get(_key(location))
        if kept is None and stop <= READ_BLOCK:
            return _stream_range(location, start, stop)
        text = kept if kept is not None else _decompressed(location)
        return bytes(memoryview(text)[start:stop])
    return location.read_range(start, stop)


def sample_hash(read: Callable[[int, int], bytes], size: int) -> str:
    """sha256 of the first and last MiB (of ``size`` bytes of text, ``read(start, stop)``):
    a cheap content check on top of size and layout."""
    h = hashlib.sha256()
    h.update(read(0, min(size, SAMPLE_BYTES)))
    if size > SAMPLE_BYTES:
        h.update(read(max(SAMPLE_BYTES, size - SAMPLE_BYTES), size))
    return h.hexdigest()


def stream_sample_hash(f: BinaryIO, location: Location, size: int) -> str:
    """:func:`sample_hash` of ``size`` bytes of text just read through ``f`` (from
    :func:`open_stream`): of a compressed file, from the ends its stream kept."""
    raw = getattr(f, "raw", None)
    read = raw.kept if isinstance(raw, _Inflating) else functools.partial(read_range, location)
    return sample_hash(read, size)
