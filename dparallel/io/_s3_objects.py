"""What a location at ``s3://`` or ``az://`` does, through obstore's client
(:mod:`dparallel.io._s3`, :mod:`dparallel.io._azure`).

Each function takes the bucket's client and a key (:meth:`Location.object_store
<dparallel.io.location.Location.object_store>` gives both) and the location to name in
an error. Failures come out as the ``OSError`` (``FileNotFoundError``, ``PermissionError``)
a file would give, naming the location in one line; a refused conditional write is not a
failure but ``None``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import re
import time
from typing import TYPE_CHECKING, Any

from dparallel.io._s3 import as_os_errors

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from obstore.store import S3Store

__all__ = [
    "DELETE_TRIES",
    "S3Reader",
    "exists",
    "get",
    "get_range",
    "head",
    "names",
    "put",
    "put_file",
    "remove",
    "resend_delete",
]


def head(store: S3Store, key: str, where: object) -> dict[str, Any]:
    """The object's metadata (``size``, ``last_modified``, ``e_tag``); a bucket itself is
    no object (``IsADirectoryError``)."""
    import obstore

    if not key.strip("/"):
        raise IsADirectoryError(errno.EISDIR, f"{where}: a bucket, not an object")
    with as_os_errors(where):
        return dict(obstore.head(store, key))


def exists(store: S3Store, key: str, where: object) -> bool:
    """Whether an object is at ``key`` or any object below ``key/`` (``False`` in a bucket
    that does not exist)."""
    import obstore

    with as_os_errors(where):
        if key.strip("/"):
            try:
                obstore.head(store, key)
                return True
            except FileNotFoundError:
                pass
        with _no_bucket_is_empty():
            for batch in obstore.list(store, _prefix(key), chunk_size=1):
                return len(batch) > 0
        return False


def names(store: S3Store, key: str, where: object) -> list[str]:
    """Names directly below ``key/`` (objects and prefixes, one level), sorted; a folder's
    own marker object (``key/``, as consoles make them) is not among them; none in a
    bucket that does not exist."""
    import obstore

    listed: dict[str, Any] = {"objects": [], "common_prefixes": []}
    with as_os_errors(where), _no_bucket_is_empty():
        listed = dict(obstore.list_with_delimiter(store, _prefix(key)))
    own = key.strip("/")
    found = [o["path"] for o in listed["objects"]] + list(listed["common_prefixes"])
    return sorted({p.rstrip("/").rsplit("/", 1)[-1] for p in found if p.strip("/") != own})


def _prefix(key: str) -> str | None:
    """The listing prefix of everything below ``key`` (``None``: the whole bucket)."""
    return f"{key.strip('/')}/" if key.strip("/") else None


@contextlib.contextmanager
def _no_bucket_is_empty() -> Iterator[None]:
    """Inside: S3's NoSuchBucket, Azure's ContainerNotFound (obstore's generic error) is no
    error, only nothing."""
    import obstore.exceptions as errors

    try:
        yield
    except errors.BaseError as exc:
        if "NoSuchBucket" not in str(exc) and "ContainerNotFound" not in str(exc):
            raise


def get(store: S3Store, key: str, where: object) -> tuple[bytes, str] | None:
    """The object's bytes and ETag, or ``None`` if there is none."""
    import obstore

    with as_os_errors(where):
        try:
            found = obstore.get(store, key)
        except FileNotFoundError:
            return None
        data, etag = bytes(found.bytes()), found.meta["e_tag"]
    if not etag:
        raise OSError(f"{where}: the service gave no ETag for the object")
    return data, str(etag)


def get_range(store: S3Store, key: str, start: int, stop: int, where: object) -> bytes:
    """Bytes ``[start, stop)`` of the object, in one ranged request."""
    import obstore

    if stop <= start:
        return b""
    with as_os_errors(where):
        return bytes(obstore.get_range(store, key, start=start, end=stop))


#: What a 404 to an ``If-Match`` write may say for "the object is gone" (a refusal):
#: S3's and Azure's codes, or no error document; any other (a missing bucket or
#: container, an unknown account) is raised.
_OBJECT_GONE = re.compile(r"<Code>(NoSuchKey|BlobNotFound)</Code>")
_ANY_CODE = re.compile(r"<Code>")


def put(
    store: S3Store, key: str, data: bytes, where: object, *, if_absent: bool = False,
    if_match: str | None = None,
) -> str | None:  # fmt: skip
    """Write ``data`` in one request; the new ETag, or ``None`` where the condition does
    not hold (``if_absent``: an object is there; ``if_match``: its ETag changed)."""
    import obstore
    import obstore.exceptions as errors

    mode: Any = "overwrite"
    if if_absent:
        mode = "create"
    elif if_match is not None:
        mode = {"e_tag": if_match}
    with as_os_errors(where):
        try:
            done = obstore.put(store, key, data, mode=mode, use_multipart=False)
        except (errors.AlreadyExistsError, errors.PreconditionError):
            return None  # 412, or 409 (a conditional write in flight): obstore maps both
        except FileNotFoundError as exc:
            said = str(exc)
            if if_match is None or (_ANY_CODE.search(said) and not _OBJECT_GONE.search(said)):
                raise
            return None  # the object is gone, so it changed: 404 to If-Match (AWS, or a
            # service in front of Azure; obstore maps it to a refusal on S3 only)
    if not done["e_tag"]:
        raise OSError(f"{where}: the service gave no ETag for the object just written")
    return str(done["e_tag"])


def put_file(store: S3Store, key: str, path: Path, where: object) -> None:
    """Upload the local file ``path`` (in parts where it is large); on Azure, sent whole
    once more where its block list was refused as invalid: obstore resends a Put Block
    List whose answer was lost (or a 5xx that came after it landed), which names its
    blocks as uncommitted, and they were committed by the first send (400
    InvalidBlockList; an upload of the same bytes again is harmless)."""
    import obstore
    import obstore.exceptions as errors

    with as_os_errors(where):
        try:
            obstore.put(store, key, path)
        except errors.GenericError as exc:
            if "InvalidBlockList" not in str(exc):
                raise
            obstore.put(store, key, path)


def remove(store: S3Store, key: str, where: object, *, recursive: bool = False) -> None:
    """Delete the object (``recursive``: and every object below ``key/``); quiet if absent
    (S3 deletes a missing key without complaint, Azure refuses: ignored); recursive: a
    listing and one request per 1,000 objects, then the folders they were in. A bucket
    itself is refused."""
    import obstore

    if not key.strip("/"):
        raise IsADirectoryError(errno.EISDIR, f"{where}: refusing to delete a whole bucket")
    with as_os_errors(where):
        if not recursive:
            with contextlib.suppress(FileNotFoundError):
                obstore.delete(store, key)
            return
        top = key.strip("/")
        folders = {f"{top}/"}
        for batch in obstore.list(store, _prefix(key), chunk_size=1000):
            paths = [o["path"] for o in batch]
            folders.update(_folders_between(top, paths))
            _delete_many(store, paths)
        # then the folders, deepest first, and the key itself: S3 has no folders (deleting
        # a missing key is quiet), but a filer-backed service (SeaweedFS) keeps each as an
        # empty folder, which a listing shows as a name, until its own key is deleted
        ordered = [*sorted(folders, key=lambda f: (-f.count("/"), f)), top]
        for start in range(0, len(ordered), 1000):
            _delete_many(store, ordered[start : start + 1000])


#: Sends of a delete whose connection dropped, before its error is raised.
DELETE_TRIES = 3


def resend_delete(exc: BaseException, attempt: int) -> float | None:
    """Seconds to wait before sending a failed delete (``attempt``: from 0) again, or
    ``None`` to raise ``exc``. obstore deletes by S3's DeleteObjects, a POST (one key too),
    which it resends after a 5xx but not where its connection dropped, whose outcome it
    cannot know; deleting the same keys twice is harmless, so that is sent again (before,
    one reset failed a task, or a run's removal of an old generation)."""
    import obstore.exceptions as errors

    dropped = isinstance(exc, errors.GenericError) and "HTTP error:" in str(exc).split("\n")[0]
    return 0.5 * 2**attempt if dropped and attempt < DELETE_TRIES - 1 else None


#: Deletes at a time where each key is deleted on its own (:func:`_delete_each`).
_DELETES_AT_ONCE = 16


def _delete_many(store: S3Store, paths: list[str]) -> None:
    """Delete ``paths`` in one request, sent again where its connection dropped; where the
    service refuses a missing key (Azure's batch: obstore then sends none of the batches
    after it), each key on its own, the missing ones ignored."""
    import obstore

    for attempt in range(DELETE_TRIES):
        try:
            obstore.delete(store, paths)
            return
        except FileNotFoundError:
            _delete_each(store, paths)
            return
        except Exception as exc:
            pause = resend_delete(exc, attempt)
            if pause is None:
                raise
            time.sleep(pause)


def _delete_each(store: S3Store, paths: list[str]) -> None:
    """Delete each of ``paths`` in a request of its own (several at a time), a missing one
    ignored."""
    from concurrent.futures import ThreadPoolExecutor

    import obstore

    def delete(path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            obstore.delete(store, path)

    with ThreadPoolExecutor(_DELETES_AT_ONCE) as pool:
        list(pool.map(delete, paths))


def _folders_between(top: str, paths: list[str]) -> set[str]:
    """Every folder key (``top/a/``, ``top/a/b/``) that holds one of ``paths``, below ``top``."""
    folders = set()
    for path in paths:
        parts = path[len(top) + 1 :].split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folders.add(f"{top}/{'/'.join(parts[:depth])}/")
    return folders


class S3Reader(io.RawIOBase):
    """An object read front to back in blocks of ``block`` bytes (obstore's reader), as the
    raw binary file ``io.BufferedReader`` and ``gzip`` take; errors as ``OSError``."""

    def __init__(self, store: S3Store, key: str, where: object, block: int) -> None:
        import obstore

        super().__init__()
        self._where = where
        self._reader: Any = None
        size = int(head(store, key, where)["size"])  # a bucket or a missing object, named
        with as_os_errors(where):
            self._reader = obstore.open_reader(store, key, buffer_size=block, size=size)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._checkClosed()
        view = memoryview(buffer).cast("B")
        with as_os_errors(self._where):
            data = memoryview(self._reader.read(len(view)))
        view[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        self._checkClosed()
        with as_os_errors(self._where):
            return bytes(self._reader.readall())

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()
        with as_os_errors(self._where):
            return int(self._reader.seek(offset, whence))

    def tell(self) -> int:
        self._checkClosed()
        return int(self._reader.tell())

    def close(self) -> None:
        if self._reader is not None and not self.closed:
            self._reader.close()
        super().close()
