"""Where data is: one :class:`Location` for a local path or an fsspec URL.

Every place dparallel names an input file or a store takes a location: a local path
(``data.xyz``, ``~/x``, ``/abs``, ``file:///abs``) or a URL whose scheme fsspec knows
(``s3://bucket/key``, ``gs://…``, ``az://…``, ``memory://…``). A URL is never taken for a
relative path (``s3://b/x`` is not ``./s3:/b/x``). Credentials and endpoints come from
the standard environment of each process (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, …),
or from ``storage_options`` (passed to fsspec, e.g. ``{"endpoint_url": …}``), which travel
with the location to the workers. What needs a local folder asks for
:meth:`Location.require_local`, which names what needs it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dparallel.errors import DParallelError

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = ["READ_BLOCK", "Location", "LocationError", "Where", "as_location", "is_url"]

#: Bytes a remote file is read in: one ranged request each.
READ_BLOCK = 1 << 22

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
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
        """The fsspec filesystem and the path in it (the client's import errors named)."""
        import fsspec

        key = (self.protocol, repr(sorted(self.storage_options)))
        fs = _FS.get(key)
        if fs is None:
            try:
                fs = fsspec.filesystem(self.protocol, **self.options)
            except ImportError as exc:
                raise LocationError(
                    f"{self.url}: no client for {self.protocol}:// is installed ({exc}); "
                    'for S3: pip install "dparallel[s3]"'
                ) from None
            _FS[key] = fs
        path = self.url if self.is_local else fs._strip_protocol(self.url)
        return fs, path

    def exists(self) -> bool:
        """Whether something is there (a file, a folder, or objects below a prefix)."""
        if self.local is not None:
            return self.local.exists() or self.local.is_symlink()
        fs, path = self.filesystem()
        return bool(fs.exists(path))

    def is_file(self) -> bool:
        """Whether a file (an object) is there."""
        if self.local is not None:
            return self.local.is_file()
        fs, path = self.filesystem()
        try:
            return bool(fs.isfile(path))
        except OSError:
            return False

    def info(self) -> dict[str, Any]:
        """``size`` (bytes) and ``mtime_ns`` (0 where the store has no time) of a file."""
        if self.local is not None:
            st = self.local.stat()
            return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        on_s3 = self._on_s3()
        if on_s3 is not None:
            import obstore

            from dparallel.io._s3 import as_os_errors

            with as_os_errors(self.url):
                meta = obstore.head(*on_s3)
            return {
                "size": int(meta["size"]),
                "mtime_ns": int(meta["last_modified"].timestamp() * 1e9),
            }
        fs, path = self.filesystem()
        info = fs.info(path)
        when = info.get("LastModified") or info.get("mtime") or info.get("created")
        stamp = when.timestamp() if hasattr(when, "timestamp") else when
        return {"size": int(info["size"]), "mtime_ns": int(float(stamp or 0) * 1e9)}

    def open(self, mode: str = "rb") -> Any:
        """A file object (binary by default)."""
        if self.local is not None:
            return open(self.local, mode)
        fs, path = self.filesystem()
        return fs.open(path, mode, block_size=READ_BLOCK)

    def read_range(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of a file (one ranged request for a URL)."""
        if self.local is not None:
            with open(self.local, "rb") as fh:
                fh.seek(start)
                return fh.read(stop - start)
        on_s3 = self._on_s3()
        if on_s3 is not None:
            import obstore

            from dparallel.io._s3 import as_os_errors

            if stop <= start:
                return b""
            with as_os_errors(self.url):
                return bytes(obstore.get_range(*on_s3, start=start, end=stop))
        fs, path = self.filesystem()
        return bytes(fs.cat_file(path, start=start, end=stop))

    def _on_s3(self) -> tuple[Any, str] | None:
        """obstore's client for the bucket and the key, for a location on S3 (what a task
        reads goes through it: no botocore in a worker); ``None`` for any other."""
        from dparallel.io._s3 import S3_PROTOCOLS, s3_store

        if self.protocol not in S3_PROTOCOLS:
            return None
        bucket, _, key = self.url.split("://", 1)[1].partition("/")
        return s3_store(f"s3://{bucket}", self.options), key


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
    text = os.fspath(target)
    if is_url(text):
        return Location(text, options)
    return Location(str(Path(text.removeprefix("file://")).expanduser().absolute()), options)
