"""Create, reopen, replace and judge a store at a URL (object storage).

The same decisions as a local store (:mod:`~dparallel.store._create`), with what object
storage offers: the lease is an object (:class:`~dparallel.store._lease.ObjectLease`), the
zarr group lives in a generation and a replacement is published by one conditional write
of the pointer (:mod:`~dparallel.store._generations`). Everything below a store's URL is
dparallel's: the pointer, the lease and the generations (or, for a store without
generations, the layout of a local store); anything else there is refused.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from zarr.core.sync import sync

from dparallel.errors import StoreBusyError, StoreError, StoreMismatchError, UnsafePathError
from dparallel.store import _objects
from dparallel.store._backend import open_backend
from dparallel.store._batch import put_all
from dparallel.store._create import StoreStatus, _build, _differences, status_of
from dparallel.store._generations import (
    foreign_names,
    is_generation,
    new_generation,
    read_pointer,
    refuse_foreign,
    resolve,
    write_pointer,
)
from dparallel.store._layout import FORMAT_VERSION, _jsonable
from dparallel.store._lease import StoreLease
from dparallel.store._store import Store

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from dparallel.io.location import Location
    from dparallel.store.plan import Plan

__all__ = ["create_remote", "publish_remote", "refuse_remote_target", "remote_status"]

log = logging.getLogger(__name__)

#: Top-level names of a store without generations (a local store uploaded as it is).
_LAYOUT = {"zarr.json", "structures", "partitions", "parts", "atoms"}


def remote_status(
    url: Location, fingerprint: Mapping[str, Any] | None, config: Any, plan: Plan | None
) -> StoreStatus:
    """:func:`~dparallel.store.store_status` for a store at a URL."""
    where: Any = url
    root = resolve(url)
    if root is None:
        return StoreStatus(where, "foreign" if foreign_names(url) else "missing")
    try:
        store = Store(root, mode="r", direct=True)
    except StoreError:
        return StoreStatus(where, "foreign")
    version = store.attrs.get("format_version")
    if version != FORMAT_VERSION:
        return StoreStatus(where, "other_format", format_version=version)
    return status_of(where, store, fingerprint, config, plan)


def _check_protected(url: Location, protect: Iterable[Any]) -> None:
    """Refuse a store URL that is, or holds, a file the run reads."""
    for item in protect:
        text = str(item)
        if text == url.url or text.startswith(url.url.rstrip("/") + "/"):
            raise UnsafePathError(f"refusing to write the store {url}: it holds {text}, an input")


def refuse_remote_target(url: Location, protect: Iterable[Any] = ()) -> None:
    """Before a run takes the lease (which would leave its object in a user's prefix): raise
    what :func:`create_remote` raises at once for ``url`` holding an input of the run
    (``protect``) or objects of a user's; a store, an empty prefix or nothing pass."""
    _check_protected(url, protect)
    if read_pointer(url) is None:
        refuse_foreign(url)


def _cleanup(url: Location, keep: set[str]) -> None:
    """Delete generations not in ``keep`` (call it holding the lease)."""
    for name in url.names():
        if is_generation(name) and name not in keep:
            log.info("removing %s, a generation no longer current", url.child(name))
            url.child(name).child("zarr.json").remove()  # first: its readers fail, not fill
            url.child(name).remove(recursive=True)


def _build_generation(url: Location, fingerprint: dict, config: dict, plan: Plan) -> str:
    """A new generation holding an empty store: zarr's documents made in memory, then put
    concurrently (through zarr's API each array is several round trips, one after another)."""
    from zarr.storage import MemoryStore

    gen = new_generation()
    staged = MemoryStore()
    _build(staged, fingerprint, config, plan)
    sync(_put_staged(staged, open_backend(url.child(gen), "r+", direct=True).zarr_store))
    return gen


async def _put_staged(staged: Any, target: Any) -> None:
    """Every object of ``staged`` into ``target``, the root document (the store's
    attributes) last."""
    from zarr.core.buffer import default_buffer_prototype

    items = {}
    async for key in staged.list():
        found = await staged.get(key, default_buffer_prototype())
        items[key] = found.to_bytes()
    root = [("zarr.json", items.pop("zarr.json"))]
    await put_all(target, (list(items.items()), root))


def create_remote(
    url: Location,
    *,
    source_fingerprint: Mapping[str, Any],
    plan: Plan,
    config: Mapping[str, Any],
    overwrite: bool,
    protect: Iterable[Any],
    any_plan: bool,
    aside: bool,
) -> Store:
    """:func:`~dparallel.store.create_store` at a URL, under the store's lease."""
    _objects.require_conditional_writes(url)
    fingerprint = _jsonable(source_fingerprint)
    config = _jsonable(config)
    _check_protected(url, [*protect, fingerprint.get("path") or ""])
    compared = None if any_plan else plan
    with StoreLease(url, command="create_store"):
        status = remote_status(url, fingerprint, config, compared)
        if status.kind == "foreign":
            refuse_foreign(url)  # objects of a user's (a zarr group of theirs too)
            raise StoreMismatchError(
                f"{url} holds a store dparallel cannot open (its pointer names a generation "
                "that is no store, or its zarr.json is not a store's); dparallel writes a "
                "store only under an empty prefix or its own store"
            )
        if status.kind != "missing" and not overwrite and not status.matches:
            raise status.mismatch_error()
        found = read_pointer(url)
        pointer, etag = found if found is not None else ({}, None)
        current = pointer.get("current")
        building = pointer.get("building")
        if status.matches and not overwrite:
            _cleanup(url, {current, building} - {None})  # type: ignore[arg-type]
            return Store(resolve(url) or url, mode="r+", direct=True)
        if status.kind != "missing" and aside and building:  # resume a replacement
            candidate = Store(url.child(building), mode="r", direct=True)
            diffs = _differences(candidate.attrs, fingerprint, config, compared)
            if not diffs:
                _cleanup(url, {current, building} - {None})
                log.info("resuming the replacement of %s begun in %s", url, building)
                return Store(url.child(building), mode="r+", direct=True)
        _cleanup(url, {current} - {None})  # type: ignore[arg-type]
        gen = _build_generation(url, fingerprint, config, plan)
        replace = status.kind != "missing"
        if replace and aside:
            new = {"current": current, "building": gen}
        else:
            new = {"current": gen, "building": None}
        if not write_pointer(url, new, etag):
            raise StoreBusyError(
                f"{url}: its pointer changed while this run held the lease (another run "
                "without the lease, or a user); nothing was published: rerun"
            )
        if replace and not aside:
            _drop_unversioned(url)
        log.info("created store %s (%s): %d partitions", url, gen, plan.n_partitions)
        return Store(url.child(gen), mode="r+", direct=True)


def _drop_unversioned(url: Location) -> None:
    """After replacing a store without generations, delete its layout below ``url``."""
    if not url.child("zarr.json").is_file():
        return
    url.child("zarr.json").remove()  # first: its readers fail, not read fill values
    for name in url.names():
        if name in _LAYOUT:
            url.child(name).remove(recursive=True)


def publish_remote(store: Store) -> Store:
    """Publish a complete replacement built as a new generation (else return ``store``)."""
    root, url = store.root, store.target
    if root is None or root == url or not store.is_complete:
        return store
    found = read_pointer(url)
    if found is None:
        return store
    pointer, etag = found
    if pointer.get("building") != root.name:
        return store
    if not write_pointer(url, {"current": root.name, "building": None}, etag):
        raise StoreBusyError(f"{url}: its pointer changed while publishing; rerun")
    _drop_unversioned(url)
    log.info("replaced %s with the store built in %s", url, root.name)
    return Store(root, mode="r+", direct=True)
