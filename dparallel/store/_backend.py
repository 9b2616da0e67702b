"""Which zarr store backs a dparallel store: a local folder or any other zarr ``Store``.

A path (``str`` or ``os.PathLike``, or a ``file://`` URL) opens a
:class:`zarr.storage.LocalStore`; a zarr ``Store`` object (``MemoryStore``,
``FsspecStore``, …) is used as given; another URL (``s3://…``, ``memory://…``, or a
:class:`~dparallel.io.location.Location` with ``storage_options``) opens at the store's
current generation (:mod:`~dparallel.store._generations`): ``s3://`` and ``az://`` through obstore
(:mod:`~dparallel.store._s3`), any other through fsspec
(:meth:`zarr.storage.FsspecStore.from_url`). Every read and write goes through that zarr
store; only a local one also gets what needs a filesystem: the direct-file writes
(:mod:`~dparallel.store._direct`), the lease file beside the store and creation aside
then renamed into place (:mod:`~dparallel.store._create`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from zarr.abc.store import Store as ZarrStore
from zarr.storage import FsspecStore, LocalStore

from dparallel.errors import StoreError
from dparallel.io.location import OBJECT_PROTOCOLS, Location, as_location, is_url
from dparallel.store._generations import is_generation, resolve
from dparallel.store._s3 import s3_zarr_store

__all__ = [
    "Backend",
    "StoreTarget",
    "open_backend",
    "remote_location",
    "store_folder",
]

#: Where a dparallel store lives: a local path, a URL, or a zarr store object.
StoreTarget = str | os.PathLike[str] | ZarrStore | Location


@dataclass(frozen=True)
class Backend:
    """The zarr store behind a dparallel store, and its folder if it is a local one."""

    zarr_store: ZarrStore
    #: The store's folder (resolved) for a local store; ``None`` for any other.
    local: Path | None
    #: Where it is, for messages: the folder, the URL, or the zarr store's description.
    location: str
    #: For a URL: the location the user named, and where its zarr group is (its current
    #: generation, or the URL itself for a store without generations).
    target: Location | None = None
    root: Location | None = None


def remote_location(target: object) -> Location | None:
    """The :class:`Location` of ``target`` if it is a URL (not a folder, not a zarr store)."""
    if isinstance(target, Location):
        return None if target.is_local else target
    if isinstance(target, str) and is_url(target):
        return as_location(target)
    return None


def store_folder(target: StoreTarget) -> Path | None:
    """The (resolved) folder of ``target`` if it is a local store; ``None`` otherwise (a
    URL, another zarr store): a question, where :func:`~dparallel.io.location.require_local_path`
    refuses a URL."""
    if isinstance(target, LocalStore):
        return Path(target.root).expanduser().resolve()
    if isinstance(target, ZarrStore):
        return None
    local = as_location(target).local
    return None if local is None else local.resolve()


def open_backend(target: StoreTarget, mode: Literal["r", "r+"], direct: bool = False) -> Backend:
    """The zarr store for ``target``, read-only for ``mode="r"``.

    A URL opens at its current generation, or (``direct``) at exactly that URL (the
    generation itself, as a pickled store reopens).

    Raises :class:`StoreError` for something that is neither a path, a URL nor a zarr store,
    and for a read-only zarr store asked for writing.
    """
    read_only = mode == "r"
    remote = remote_location(target)
    if remote is not None:
        if is_generation(remote.name):  # a generation named directly (a task's reference)
            root = remote  # never holds a pointer: opened as it is, no request to ask
            parent = remote.sibling("")
            remote = type(remote)(parent.url.rstrip("/"), remote.storage_options)
        else:
            root = remote if direct else (resolve(remote) or remote)
        if root.protocol in OBJECT_PROTOCOLS:
            return Backend(s3_zarr_store(root, read_only), None, str(remote), remote, root)
        try:
            store = FsspecStore.from_url(
                root.url, storage_options=root.options or None, read_only=read_only
            )
        except (ImportError, ValueError, TypeError) as exc:
            raise StoreError(f"cannot open {remote} as a zarr store: {exc}") from exc
        return Backend(store, None, str(remote), remote, root)
    named = isinstance(target, (str, os.PathLike, ZarrStore, Location))
    local = store_folder(target) if named else None
    if local is not None:
        return Backend(LocalStore(local, read_only=read_only), local, str(local))
    if isinstance(target, ZarrStore):
        if target.read_only and not read_only:
            raise StoreError(f"{target} is a read-only zarr store; it cannot be opened to write")
        given = target if target.read_only == read_only else target.with_read_only(read_only)
        return Backend(given, None, str(target))
    raise StoreError(
        f"a store is a path, a URL or a zarr store, got {type(target).__name__}: {target!r}"
    )
