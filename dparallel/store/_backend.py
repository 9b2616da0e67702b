"""Which zarr store backs a dparallel store: a local folder or any other zarr ``Store``.

A path (``str`` or ``os.PathLike``, or a ``file://`` URL) opens a
:class:`zarr.storage.LocalStore`; a zarr ``Store`` object (``MemoryStore``,
``FsspecStore``, …) is used as given; another URL (``s3://…``, ``memory://…``) opens
through fsspec (:meth:`zarr.storage.FsspecStore.from_url`). Every read and write goes
through that zarr store; only a local one also gets what needs a filesystem: the
direct-file writes (:mod:`~dparallel.store._direct`), the lease file beside the store and
creation aside then renamed into place (:mod:`~dparallel.store._create`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from zarr.abc.store import Store as ZarrStore
from zarr.storage import FsspecStore, LocalStore

from dparallel.errors import StoreError

__all__ = ["Backend", "StoreTarget", "local_path", "open_backend"]

#: Where a dparallel store lives: a local path, a URL, or a zarr store object.
StoreTarget = str | os.PathLike[str] | ZarrStore

_FILE_URL = "file://"


@dataclass(frozen=True)
class Backend:
    """The zarr store behind a dparallel store, and its folder if it is a local one."""

    zarr_store: ZarrStore
    #: The store's folder (resolved) for a local store; ``None`` for any other.
    local: Path | None
    #: Where it is, for messages: the folder, or the zarr store's own description.
    location: str


def _is_url(text: str) -> bool:
    return "://" in text and not text.startswith(_FILE_URL)


def local_path(target: StoreTarget) -> Path | None:
    """The (resolved) folder of ``target`` if it is a local store; ``None`` otherwise."""
    if isinstance(target, LocalStore):
        return Path(target.root).expanduser().resolve()
    if isinstance(target, ZarrStore):
        return None
    text = os.fspath(target)
    if _is_url(text):
        return None
    if text.startswith(_FILE_URL):
        text = text[len(_FILE_URL) :]
    return Path(text).expanduser().resolve()


def open_backend(target: StoreTarget, mode: Literal["r", "r+"]) -> Backend:
    """The zarr store for ``target``, read-only for ``mode="r"``.

    Raises :class:`StoreError` for something that is neither a path, a URL nor a zarr store,
    and for a read-only zarr store asked for writing.
    """
    read_only = mode == "r"
    local = local_path(target) if isinstance(target, (str, os.PathLike, ZarrStore)) else None
    if local is not None:
        return Backend(LocalStore(local, read_only=read_only), local, str(local))
    if isinstance(target, ZarrStore):
        if target.read_only and not read_only:
            raise StoreError(f"{target} is a read-only zarr store; it cannot be opened to write")
        store = target if target.read_only == read_only else target.with_read_only(read_only)
        return Backend(store, None, str(target))
    if isinstance(target, str):
        try:
            store = FsspecStore.from_url(target, read_only=read_only)
        except (ImportError, ValueError, TypeError) as exc:
            raise StoreError(f"cannot open {target} as a zarr store: {exc}") from exc
        return Backend(store, None, target)
    raise StoreError(
        f"a store is a path, a URL or a zarr store, got {type(target).__name__}: {target!r}"
    )
