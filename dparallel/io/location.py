"""Where data is: one :class:`Location` for a local path or an fsspec URL.

Every place dparallel names an input file or a store takes a location: a local path
(``data.xyz``, ``~/x``, ``/abs``, ``file:///abs``) or a URL: ``s3://bucket/key`` and
``az://container/key``, read and written through obstore (:mod:`dparallel.io._s3`,
:mod:`dparallel.io._azure`), or any other scheme fsspec knows (``gs://…``,
``memory://…``). A URL is never taken for a relative path
(``s3://b/x`` is not ``./s3:/b/x``). Credentials and endpoints come from the standard
environment of each process (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``AZURE_*``, …),
or from ``storage_options`` (s3fs's names on S3, adlfs's on Azure, fsspec's elsewhere),
which travel with the location to the workers. What needs a local folder asks for
:meth:`Location.require_local`, which names what needs it.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dparallel.errors import ArgumentTypeError, DParallelError
from dparallel.io import _azure, _s3_objects
from dparallel.io._s3 import S3_PROTOCOLS, check_options, s3_store

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = [
    "OBJECT_PROTOCOLS",
    "READ_BLOCK",
    "Location",
    "LocationError",
    "Where",
    "as_location",
    "is_url",
    "location_key",
    "require_local_path",
]

#: Bytes a remote file is read in: one ranged request each.
READ_BLOCK = 1 << 22

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: ``file://`` and ``file://localhost`` (any case) before an absolute path.
_FILE_URL = re.compile(r"^file://(localhost)?(?=/)", re.IGNORECASE)
#: Schemes read and written through obstore (:meth:`Location.object_store`).
OBJECT_PROTOCOLS = (*S3_PROTOCOLS, *_azure.AZURE_PROTOCOLS)
#: Filesystems opened in this process, by protocol and options (fsspec caches too).
_FS: dict[tuple[str, str], Any] = {}


class LocationError(DParallelError, ValueError):
    """A location that cannot be used as asked (e.g. a URL where a local folder is needed)."""


def is_url(text: str) -> bool:
    """Whether ``text`` is a URL other than ``file://`` (a remote location)."""
    match = _SCHEME.match(text)
    return match is not None and match.group(1).lower() != "file"


@dataclass(frozen=True)
class Location:
    """A local path (absolute) or a URL, with the fsspec ``storage_options`` to reach it.

    Built by :func:`as_location`. Hashable, picklable (what a Dask task receives), and
    printed as the user wrote it (the URL, or the absolute path).
    """

    url: str
    storage_options: tuple[tuple[str, Any], ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"Location({self.url!r})"

    @property
    def is_local(self) -> bool:
        """A local path (no URL scheme)."""
        return not is_url(self.url)

    @property
    def local(self) -> Path | None:
        """The local path; ``None`` for a URL."""
        return Path(self.url) if self.is_local else None

    def require_local(self, what: str) -> Path:
        """The local path, or a :class:`LocationError` saying that ``what`` needs one."""
        if self.local is None:
            raise LocationError(f"{self.url}: {what} needs a local path, not a URL")
        return self.local

    @property
    def protocol(self) -> str:
        """``"file"`` for a local path, else the URL's scheme (``"s3"``, ``"memory"``…)."""
        match = _SCHEME.match(self.url)
        return match.group(1).lower() if match and not self.is_local else "file"

    @property
    def options(self) -> dict[str, Any]:
        """The fsspec ``storage_options`` as a dict."""
        return dict(self.storage_options)

    @property
    def name(self) -> str:
        """The last component (file or folder name)."""
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    def child(self, key: str) -> Location:
        """``key`` (``a/b``) below this location."""
        if self.local is not None:
            return Location(str(self.local / key), self.storage_options)
        return Location(f"{self.url.rstrip('/')}/{key}", self.storage_options)

    def sibling(self, name: str) -> Location:
        """A location beside this one, named ``name``."""
        if self.local is not None:
            return Location(str(self.local.with_name(name)), self.storage_options)
        head = self.url.rstrip("/").rsplit("/", 1)[0]
        return Location(f"{head}/{name}", self.storage_options)

    def filesystem(self) -> tuple[AbstractFileSystem, str]:
        """The fsspec filesystem and the path in it (the client's import errors named);
        not for ``s3://`` or ``az://``, which go through obstore (:meth:`object_store`)."""
        import fsspec

        if self.protocol in OBJECT_PROTOCOLS:  # judged by name: no client made to refuse
            raise LocationError(f"{self.url}: read and written through obstore, not fsspec")
        key = (self.protocol, repr(sorted(self.storage_options)))
        fs = _FS.get(key)
        if fs is None:
            try:
                fs = fsspec.filesystem(self.protocol, **self.options)
            except ImportError as exc:
                raise LocationError(
                    f"{self.url}: no client for {self.protocol}:// is installed ({exc})"
                ) from None
            except ValueError as exc:  # fsspec knows no such protocol
                raise LocationError(f"{self.url}: unknown URL scheme ({exc})") from None
            _FS[key] = fs
        path = self.url if self.is_local else fs._strip_protocol(self.url)
        return fs, path

    def check_client(self) -> None:
        """Raise (:class:`LocationError`, ``S3OptionError``) where this location's client
        is not installed or its options are not understood; nothing is requested."""
        if self.protocol in S3_PROTOCOLS:
            check_options(self.url, self.options)
        elif self.protocol in _azure.AZURE_PROTOCOLS:
            _azure.check_options(self.url, self.options)
        elif not self.is_local:
            self.filesystem()

    def exists(self) -> bool:
        """Whether something is there (a file, a folder, or objects below a prefix)."""
        if self.local is not None:
            return self.local.exists() or self.local.is_symlink()
        on_s3 = self.object_store()
        if on_s3 is not None:
            return _s3_objects.exists(*on_s3, self)
        fs, path = self.filesystem()
        return bool(fs.exists(path))

    def is_file(self) -> bool:
        """Whether a file (an object) is there (a service that cannot be asked raises
        ``OSError``)."""
        if self.local is not None:
            return self.local.is_file()
        on_s3 = self.object_store()
        try:
            if on_s3 is not None:
                _s3_objects.head(*on_s3, self)
                return True
            fs, path = self.filesystem()
            return bool(fs.isfile(path))
        except (FileNotFoundError, IsADirectoryError):
            return False

    def info(self) -> dict[str, Any]:
        """``size`` (bytes) and ``mtime_ns`` (0 where the store has no time) of a file."""
        if self.local is not None:
            st = self.local.stat()
            return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        on_s3 = self.object_store()
        if on_s3 is not None:
            meta = _s3_objects.head(*on_s3, self)
            return {
                "size": int(meta["size"]),
                "mtime_ns": int(meta["last_modified"].timestamp() * 1e9),
            }
        fs, path = self.filesystem()
        info = fs.info(path)
        when = info.get("LastModified") or info.get("mtime") or info.get("created")
        stamp = when.timestamp() if hasattr(when, "timestamp") else when
        return {"size": int(info["size"]), "mtime_ns": int(float(stamp or 0) * 1e9)}

    def open(self) -> Any:
        """The file, to read its bytes (a URL's in blocks of :data:`READ_BLOCK`)."""
        if self.local is not None:
            return open(self.local, "rb")
        on_s3 = self.object_store()
        if on_s3 is not None:
            return _s3_objects.S3Reader(*on_s3, self, READ_BLOCK)
        fs, path = self.filesystem()
        return fs.open(path, "rb", block_size=READ_BLOCK)

    def read_range(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of a file (one ranged request for a URL)."""
        if self.local is not None:
            with open(self.local, "rb") as fh:
                fh.seek(start)
                return fh.read(stop - start)
        on_s3 = self.object_store()
        if on_s3 is not None:
            return _s3_objects.get_range(*on_s3, start, stop, self)
        fs, path = self.filesystem()
        return bytes(fs.cat_file(path, start=start, end=stop))

    def names(self) -> list[str]:
        """Names directly below this folder or prefix (files and folders), sorted; empty
        where there is nothing."""
        if self.local is not None:
            return sorted(p.name for p in self.local.iterdir()) if self.local.is_dir() else []
        on_s3 = self.object_store()
        if on_s3 is not None:
            return _s3_objects.names(*on_s3, self)
        fs, path = self.filesystem()
        try:
            listed = fs.ls(path, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return sorted({str(p).rstrip("/").rsplit("/", 1)[-1] for p in listed})

    def upload(self, source: Path) -> None:
        """Copy the local file ``source`` here (a URL)."""
        on_s3 = self.object_store()
        if on_s3 is not None:
            _s3_objects.put_file(*on_s3, source, self)
            return
        fs, path = self.filesystem()
        fs.put_file(str(source), path)

    def remove(self, recursive: bool = False) -> None:
        """Delete the object at a URL (``recursive``: and everything below it); quiet if
        nothing is there."""
        on_s3 = self.object_store()
        if on_s3 is not None:
            _s3_objects.remove(*on_s3, self, recursive=recursive)
            return
        fs, path = self.filesystem()
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path, recursive=recursive)

    def object_store(self, small: bool = False) -> tuple[Any, str] | None:
        """obstore's client for the bucket (container) and the key, for a location on S3 or
        Azure (everything dparallel reads and writes there goes through it); ``None`` for
        any other. ``small``: a client whose requests give up within ~30 s (the lease, the
        pointer)."""
        if self.protocol not in OBJECT_PROTOCOLS:
            return None
        bucket, _, key = self.url.split("://", 1)[1].partition("/")
        if self.protocol in S3_PROTOCOLS:
            return s3_store(f"s3://{bucket}", self.options, small=small), key
        root = f"{self.protocol}://{bucket}"
        return _azure.azure_store(root, self.options, small=small), key


#: What names data: a path, a URL, or a :class:`Location`.
Where = str | os.PathLike[str] | Location


def as_location(target: Where, storage_options: dict[str, Any] | None = None) -> Location:
    """The :class:`Location` of a path, a URL or a location (``storage_options`` added).

    A local path is made absolute (``~`` expanded, relative to the working directory,
    symbolic links kept); ``file://`` is dropped; a URL is kept as written.
    """
    options = tuple(sorted((storage_options or {}).items()))
    if isinstance(target, Location):
        return Location(target.url, options or target.storage_options)
    text = _path_text(target)
    if is_url(text):
        return Location(_s3_url(text), options)
    return Location(str(_local_text(text).expanduser().absolute()), options)


def location_key(target: Where) -> str:
    """What names one file or folder however it is written, to compare two: a local path
    resolved (``~``, ``file://``, links and ``..`` undone), a URL as :func:`as_location`
    keeps it; no trailing ``/``."""
    found = as_location(target)
    return str(found.local.resolve()) if found.local is not None else found.url.rstrip("/")


def require_local_path(target: str | os.PathLike[str], what: str) -> Path:
    """``target`` as the local path it names (``~`` expanded, ``file://`` dropped, relative
    kept relative), or a :class:`LocationError` saying that ``what`` needs one: a URL is
    never taken for a relative path (``s3://b/m`` is not ``./s3:/b/m``)."""
    text = _path_text(target)
    if is_url(text):
        raise LocationError(f"{text}: {what} needs a local path, not a URL")
    return _local_text(text).expanduser()


def _path_text(target: object) -> str:
    """``os.fspath(target)`` as text, or an :class:`ArgumentTypeError` saying what names data
    (a list of ``ase.Atoms`` given for a structure file: write them to one first)."""
    try:
        text = os.fspath(target)  # type: ignore[call-overload]
    except TypeError:
        raise ArgumentTypeError(
            f"a {type(target).__name__} was given where data is named: give a path, a URL or "
            "a dparallel.io.location.Location (ase.Atoms: write them to a file first, "
            "ase.io.write('data.extxyz', frames); DeployedModel.predict and the ASE "
            "Calculator take them as they are)"
        ) from None
    if isinstance(text, bytes):
        raise ArgumentTypeError(f"{text!r}: give a path as str or pathlib.Path, not bytes")
    return text


def _local_text(text: str) -> Path:
    """A local path's text with a ``file://`` or ``file://localhost`` prefix (any case)
    dropped; ``file://~/x`` and ``file://rel/x`` stay ``~/x`` and ``rel/x``, as before."""
    if _SCHEME.match(text):  # file:// (is_url said so)
        local = _FILE_URL.sub("", text, count=1)
        return Path(local if local != text else text[len("file://") :])
    return Path(text)


def _s3_url(url: str) -> str:
    """An ``s3://`` URL with its key's empty segments dropped (``a//b`` is ``a/b``; S3 keys
    with them cannot be reached); a URL naming no bucket refused. Others as written."""
    match = _SCHEME.match(url)
    if match is None or match.group(1).lower() not in S3_PROTOCOLS:
        return url
    bucket, _, key = url[match.end() :].partition("/")
    if not bucket:
        raise LocationError(f"{url}: names no bucket (s3://bucket/key)")
    key = "/".join(part for part in key.split("/") if part)
    trailing = "/" if url.endswith("/") and key else ""
    return f"{match.group(0)}{bucket}/{key}{trailing}" if key else f"{match.group(0)}{bucket}"
