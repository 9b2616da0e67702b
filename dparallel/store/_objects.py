"""Conditional writes of small objects: create-if-absent and replace-if-unchanged (ETag).

What an object store offers instead of ``O_EXCL`` and ``rename``, and all that the lease
(:class:`~dparallel.store._lease.ObjectLease`) and the generation pointer
(:mod:`~dparallel.store._generations`) of a store on object storage need:

* :func:`get` → ``(bytes, etag)`` or ``None``;
* :func:`put_if_absent` → the new ETag, or ``None`` if an object is there
  (S3 ``PutObject`` with ``If-None-Match: *``);
* :func:`put_if_match` → the new ETag, or ``None`` if the object changed since ``etag``
  was read (``If-Match``).

Implemented for ``s3://`` (s3fs; AWS S3, MinIO, moto and most S3-compatible services
honour both headers) and ``memory://`` (one process: a lock makes it atomic). Other
URLs can be read but not written as stores (:func:`require_conditional_writes`).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from typing import TYPE_CHECKING, Any

from dparallel.errors import StoreError

if TYPE_CHECKING:
    from dparallel.io.location import Location

__all__ = ["get", "put_if_absent", "put_if_match", "remove", "require_conditional_writes"]

SUPPORTED = ("s3", "s3a", "memory")
_MEMORY_LOCK = threading.Lock()


def require_conditional_writes(location: Location) -> None:
    """Raise :class:`StoreError` unless dparallel can write conditionally at ``location``."""
    if location.protocol not in SUPPORTED:
        raise StoreError(
            f"{location}: writing a store needs conditional writes (create-if-absent, "
            f"ETag match), which dparallel implements for s3:// and memory://; "
            f"{location.protocol}:// stores can be read, not written"
        )


def _s3(location: Location) -> tuple[Any, str, str]:
    fs, path = location.filesystem()
    bucket, _, key = path.partition("/")
    return fs, bucket, key


def _refused(exc: BaseException) -> bool:
    """A precondition failure (412) or a concurrent conditional write (409)."""
    if isinstance(exc, FileExistsError):
        return True
    text = f"{exc} {exc.__cause__!r}"
    return any(k in text for k in ("PreconditionFailed", "ConditionalRequestConflict"))


def _memory_etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def get(location: Location) -> tuple[bytes, str] | None:
    """The object's bytes and ETag, or ``None`` if there is none."""
    require_conditional_writes(location)
    if location.protocol == "memory":
        fs, path = location.filesystem()
        with _MEMORY_LOCK:
            try:
                data = bytes(fs.cat_file(path))
            except FileNotFoundError:
                return None
        return data, _memory_etag(data)
    fs, bucket, key = _s3(location)
    try:
        out = fs.call_s3("get_object", Bucket=bucket, Key=key)
    except FileNotFoundError:
        return None
    body = out["Body"]
    data = _read_body(fs, body)
    return data, str(out["ETag"])


def _read_body(fs: Any, body: Any) -> bytes:
    from fsspec.asyn import sync

    async def read() -> bytes:
        async with body as stream:
            return bytes(await stream.read())

    return sync(fs.loop, read)


def _put(location: Location, data: bytes, **condition: str) -> str | None:
    fs, bucket, key = _s3(location)
    try:
        out = fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **condition)
    except Exception as exc:
        if _refused(exc):
            return None
        raise
    return str(out["ETag"])


def put_if_absent(location: Location, data: bytes) -> str | None:
    """Create the object with ``data``; ``None`` (nothing written) if one is there."""
    require_conditional_writes(location)
    if location.protocol == "memory":
        fs, path = location.filesystem()
        with _MEMORY_LOCK:
            if fs.exists(path):
                return None
            fs.pipe_file(path, data)
        return _memory_etag(data)
    return _put(location, data, IfNoneMatch="*")


def put_if_match(location: Location, data: bytes, etag: str) -> str | None:
    """Replace the object with ``data`` if its ETag is still ``etag``; else ``None``."""
    require_conditional_writes(location)
    if location.protocol == "memory":
        fs, path = location.filesystem()
        with _MEMORY_LOCK:
            try:
                current = bytes(fs.cat_file(path))
            except FileNotFoundError:
                return None
            if _memory_etag(current) != etag:
                return None
            fs.pipe_file(path, data)
        return _memory_etag(data)
    return _put(location, data, IfMatch=etag)


def remove(location: Location, recursive: bool = False) -> None:
    """Delete the object (or, ``recursive``, everything below the prefix); quiet if absent."""
    fs, path = location.filesystem()
    with contextlib.suppress(FileNotFoundError):
        fs.rm(path, recursive=recursive)
