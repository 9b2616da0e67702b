"""What a location at ``s3://`` does, through obstore's client (:mod:`dparallel.io._s3`).

Each function takes the bucket's client and a key (:meth:`Location.object_store
<dparallel.io.location.Location.object_store>` gives both) and the location to name in
an error. Failures come out as the ``OSError`` (``FileNotFoundError``, ``PermissionError``)
a file would give, naming the location in one line; a refused conditional write is not a
failure but ``None``.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from dparallel.io._s3 import as_os_errors

if TYPE_CHECKING:
    from pathlib import Path

    from obstore.store import S3Store

__all__ = [
    "S3Reader",
    "exists",
    "get",
    "head",
    "names",
    "put",
    "put_file",
    "remove",
]


def head(store: S3Store, key: str, where: object) -> dict[str, Any]:
    """The object's metadata (``size``, ``last_modified``, ``e_tag``)."""
    import obstore

    with as_os_errors(where):
        return dict(obstore.head(store, key))


def exists(store: S3Store, key: str, where: object) -> bool:
    """Whether an object is at ``key`` or any object below ``key/``."""
    import obstore

    with as_os_errors(where):
        try:
            obstore.head(store, key)
            return True
        except FileNotFoundError:
            pass
        listed = obstore.list(store, f"{key.rstrip('/')}/", chunk_size=1)
        return any(len(batch) for batch in _first(listed))


def _first(stream: Any) -> list[Any]:
    """The first batch of a listing (no more requests than that)."""
    for batch in stream:
        return [batch]
    return []


def names(store: S3Store, key: str, where: object) -> list[str]:
    """Names directly below ``key/`` (objects and prefixes, one level), sorted."""
    import obstore

    prefix = f"{key.rstrip('/')}/" if key else None
    with as_os_errors(where):
        listed = obstore.list_with_delimiter(store, prefix)
    found = [o["path"] for o in listed["objects"]] + list(listed["common_prefixes"])
    return sorted({p.rstrip("/").rsplit("/", 1)[-1] for p in found})


def get(store: S3Store, key: str, where: object) -> tuple[bytes, str] | None:
    """The object's bytes and ETag, or ``None`` if there is none."""
    import obstore

    with as_os_errors(where):
        try:
            found = obstore.get(store, key)
        except FileNotFoundError:
            return None
        return bytes(found.bytes()), str(found.meta["e_tag"])


def put(
    store: S3Store, key: str, data: bytes, where: object, *, if_absent: bool = False,
    if_match: str | None = None,
) -> str | None:  # fmt: skip
    """Write ``data`` in one request; the new ETag, or ``None`` where the condition does
    not hold (``if_absent``: an object is there; ``if_match``: its ETag changed)."""
    import obstore
    import obstore.exceptions as errors

    mode: Any = "create" if if_absent else {"e_tag": if_match} if if_match else "overwrite"
    with as_os_errors(where):
        try:
            done = obstore.put(store, key, data, mode=mode, use_multipart=False)
        except (errors.AlreadyExistsError, errors.PreconditionError):
            return None
        except errors.BaseError as exc:  # S3's 409: another conditional write in flight
            if "ConditionalRequestConflict" in str(exc):
                return None
            raise
    return str(done["e_tag"])


def put_file(store: S3Store, key: str, path: Path, where: object) -> None:
    """Upload the local file ``path`` (in parts where it is large)."""
    import obstore

    with as_os_errors(where):
        obstore.put(store, key, path)


def remove(store: S3Store, key: str, where: object, *, recursive: bool = False) -> None:
    """Delete the object (``recursive``: and every object below ``key/``); quiet if absent;
    a listing and one request per 1,000 objects."""
    import obstore

    with as_os_errors(where):
        obstore.delete(store, key)  # S3 deletes a missing key without complaint
        if recursive:
            for batch in obstore.list(store, f"{key.rstrip('/')}/", chunk_size=1000):
                obstore.delete(store, [o["path"] for o in batch])


class S3Reader(io.RawIOBase):
    """An object read front to back in blocks of ``block`` bytes (obstore's reader), as the
    raw binary file ``io.BufferedReader`` and ``gzip`` take; errors as ``OSError``."""

    def __init__(self, store: S3Store, key: str, where: object, block: int) -> None:
        import obstore

        super().__init__()
        self._where = where
        with as_os_errors(where):
            self._reader = obstore.open_reader(store, key, buffer_size=block)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        with as_os_errors(self._where):
            data = memoryview(self._reader.read(len(view)))
        view[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        with as_os_errors(self._where):
            return bytes(self._reader.readall())

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        with as_os_errors(self._where):
            return int(self._reader.seek(offset, whence))

    def tell(self) -> int:
        return int(self._reader.tell())

    def close(self) -> None:
        if not self.closed:
            self._reader.close()
        super().close()
