"""Conditional writes of small objects: create-if-absent and replace-if-unchanged (ETag).

What an object store offers instead of ``O_EXCL`` and ``rename``, and all that the lease
(:class:`~dparallel.store._lease.ObjectLease`) and the generation pointer
(:mod:`~dparallel.store._generations`) of a store on object storage need:

* :func:`get` → ``(bytes, etag)`` or ``None``;
* :func:`put_if_absent` → the new ETag, or ``None`` if an object is there
  (S3 ``PutObject`` with ``If-None-Match: *``);
* :func:`put_if_match` → the new ETag, or ``None`` if the object changed since ``etag``
  was read (``If-Match``).

Implemented for ``s3://`` and ``az://`` (obstore, :mod:`dparallel.io._s3_objects`; AWS S3,
MinIO, moto and most S3-compatible services honour both headers, as do Azure Blob Storage
and Azurite) and ``memory://`` (one process: a lock makes it atomic). Other URLs can be
read but not written as stores (:func:`require_conditional_writes`): ``gs://`` among them,
as no emulator of GCS that CI can install honours its preconditions through obstore
(docs/store-format.md, "On object storage").

A conditional write whose answer never came (a connection reset or closed after the
request was sent: obstore retries no conditional write, as its outcome is unknown) is
settled by reading the object back: holding our bytes, it was ours (the lease's and the
pointer's records are unique to their writer: a token, a heartbeat time, generation
names); still as the condition wants it, the write is sent again; anything else is the
condition refusing. Else a heartbeat whose write landed unanswered kept the ETag it had
replaced, and its next beat, refused, took the run for one another run had taken over.
A refusal (412) is read back too: obstore retries a 5xx answer itself, also of a
conditional write, and a 500, or a gateway's 502/504, may come after the service did the
write, so its retry is refused by our own write (our bytes there: it succeeded).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from typing import TYPE_CHECKING, Any

from dparallel.errors import StoreError
from dparallel.io import _s3_objects as s3_objects
from dparallel.io.location import OBJECT_PROTOCOLS

if TYPE_CHECKING:
    from collections.abc import Iterator

    from obstore.store import S3Store

    from dparallel.io.location import Location

__all__ = [
    "RERUN_ADVICE",
    "get",
    "put_if_absent",
    "put_if_match",
    "require_conditional_writes",
    "service_failed",
]

SUPPORTED = (*OBJECT_PROTOCOLS, "memory")
_MEMORY_LOCK = threading.Lock()
#: Sends of one conditional write whose answers were lost, before its error is raised.
_UNANSWERED_TRIES = 3
#: What to do where the service failed the lease's or the pointer's requests for good.
RERUN_ADVICE = "rerun the same command once the store's service answers (done work is kept)"


def require_conditional_writes(location: Location) -> None:
    """Raise :class:`StoreError` unless dparallel can write conditionally at ``location``."""
    if location.protocol not in SUPPORTED:
        raise StoreError(
            f"{location}: writing a store needs conditional writes (create-if-absent, "
            f"ETag match), which dparallel implements for s3://, az:// and memory://; "
            f"{location.protocol}:// stores can be read, not written "
            '(docs/store-format.md, "On object storage")'
        )


@contextlib.contextmanager
def service_failed(store: Location, what: str) -> Iterator[None]:
    """Inside: a request of the lease or the pointer that failed for good (after the
    client's retries) raised as one :class:`StoreError` line naming ``store``, ``what``
    failed, the service's answer and :data:`RERUN_ADVICE` (a refusal for credentials or a
    missing bucket stays the ``OSError`` that says so)."""
    try:
        yield
    except (PermissionError, FileNotFoundError):
        raise
    except OSError as exc:
        raise StoreError(f"{store}: {what} failed ({exc}); {RERUN_ADVICE}") from exc


def _memory_etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def get(location: Location) -> tuple[bytes, str] | None:
    """The object's bytes and ETag, or ``None`` if there is none."""
    require_conditional_writes(location)
    on_objects = location.object_store(small=True)
    if on_objects is not None:
        return s3_objects.get(*on_objects, location)
    fs, path = location.filesystem()
    with _MEMORY_LOCK:
        data = _memory_read(fs, path)
    return None if data is None else (data, _memory_etag(data))


def _memory_read(fs: Any, path: str) -> bytes | None:
    """An in-memory (fsspec) object's bytes, ``None`` if there is none (under the lock)."""
    try:
        return bytes(fs.cat_file(path))
    except FileNotFoundError:
        return None


def put_if_absent(location: Location, data: bytes) -> str | None:
    """Create the object with ``data``; ``None`` (nothing written) if one is there."""
    return _put(location, data, None)


def put_if_match(location: Location, data: bytes, etag: str) -> str | None:
    """Replace the object with ``data`` if its ETag is still ``etag``; else ``None``."""
    return _put(location, data, etag)


def _put(location: Location, data: bytes, etag: str | None) -> str | None:
    """The conditional write (``etag`` ``None``: create-if-absent, else replace-if-match):
    the new ETag, or ``None`` where it was refused."""
    require_conditional_writes(location)
    on_objects = location.object_store(small=True)
    if on_objects is not None:
        return _put_on_objects(*on_objects, location, data, etag)
    fs, path = location.filesystem()
    with _MEMORY_LOCK:
        if etag is None:
            refused = fs.exists(path)
        else:
            current = _memory_read(fs, path)
            refused = current is None or _memory_etag(current) != etag
        if refused:
            return None
        fs.pipe_file(path, data)
    return _memory_etag(data)


def _put_on_objects(
    store: S3Store, key: str, location: Location, data: bytes, etag: str | None
) -> str | None:
    """The conditional write on S3 or Azure (``etag`` ``None``: create-if-absent), its outcome
    settled by reading the object back where the answer was lost (module docstring)."""
    for attempt in range(_UNANSWERED_TRIES):
        try:
            written = s3_objects.put(
                store, key, data, location, if_absent=etag is None, if_match=etag
            )
            if written is None:  # refused, maybe by our own send whose answer was lost
                found = s3_objects.get(store, key, location)
                return found[1] if found is not None and found[0] == data else None
            return written
        except (PermissionError, FileNotFoundError):
            raise
        except OSError as exc:
            if attempt == _UNANSWERED_TRIES - 1:
                raise
            try:
                found = s3_objects.get(store, key, location)
            except OSError:
                raise exc from None  # the service is unreachable: the write's own error
            if found is not None and found[0] == data:
                return found[1]  # ours landed; its answer was lost
            if (found is not None) if etag is None else (found is None or found[1] != etag):
                return None  # refused: another writer's object is there
    raise AssertionError("unreachable")
