"""The store's entry points for every location: a folder, a URL, a zarr store object.

:func:`create_store`, :func:`store_status`, :func:`open_store`, :func:`publish_store`
and :func:`target_path` send a URL (``s3://…``, ``memory://…``, a
:class:`~dparallel.io.location.Location`) to :mod:`~dparallel.store._create_remote`
and everything else to :mod:`~dparallel.store._create`, so callers never ask which.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

from dparallel.errors import StoreError
from dparallel.io.location import Location, LocationError, as_location
from dparallel.store import _create
from dparallel.store._backend import StoreTarget, remote_location
from dparallel.store._create_remote import (
    create_remote,
    publish_remote,
    refuse_remote_target,
    remote_status,
)
from dparallel.store._generations import is_generation, resolve
from dparallel.store._safety import refuse_foreign_folder
from dparallel.store._store import Store

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

    from dparallel.store._create import StoreStatus
    from dparallel.store.plan import Plan

__all__ = [
    "create_store",
    "open_store",
    "publish_store",
    "refuse_foreign_target",
    "store_status",
    "target_path",
]


def store_status(
    path: StoreTarget,
    *,
    source_fingerprint: Mapping[str, Any] | None,
    config: Mapping[str, Any],
    plan: Plan | None,
) -> StoreStatus:
    """What is at ``path``, compared with a source, config and plan (reads metadata only).

    See :func:`dparallel.store._create.store_status` (a folder) and
    :func:`dparallel.store._create_remote.remote_status` (a URL).
    """
    remote = remote_location(path)
    if remote is not None:
        return remote_status(remote, source_fingerprint, config, plan)
    return _create.store_status(
        path, source_fingerprint=source_fingerprint, config=config, plan=plan
    )


def create_store(
    path: StoreTarget,
    *,
    source_fingerprint: Mapping[str, Any],
    plan: Plan,
    config: Mapping[str, Any],
    overwrite: bool = False,
    protect: Iterable[str | os.PathLike[str]] = (),
    any_plan: bool = False,
    aside: bool = False,
) -> Store:
    """Create a store with every array at final shape, or reopen a matching one.

    ``plan`` must cover the structures that ``source_fingerprint`` counts, and at most
    its atoms (checked here; a frame broken beyond parsing is planned as 0 atoms, whatever
    its count line declares: ``StructureSource.atom_counts``). A folder:
    :func:`dparallel.store._create.create_store` (the parameters and the guarantees
    there). A URL: the same guarantees on object storage
    (:func:`dparallel.store._create_remote.create_remote`).
    """
    counts = (source_fingerprint.get("n_structures"), source_fingerprint.get("n_atoms"))
    if counts[0] != plan.n_structures or not int(plan.atoms.sum()) <= (counts[1] or 0):
        raise StoreError(
            f"plan covers {plan.n_structures} structures / {int(plan.atoms.sum())} atoms, "
            f"the source has {counts[0]} / {counts[1]}"
        )
    given: dict[str, Any] = {
        "source_fingerprint": source_fingerprint,
        "plan": plan,
        "config": config,
        "overwrite": overwrite,
        "protect": protect,
        "any_plan": any_plan,
        "aside": aside,
    }
    remote = remote_location(path)
    if remote is None:
        return _create.create_store(path, **given)
    return create_remote(remote, **given)


def refuse_foreign_target(
    path: StoreTarget,
    overwrite: bool = False,
    protect: Iterable[str | os.PathLike[str] | Location] = (),
) -> None:
    """Raise, before a run starts anything (a cluster, a log file, a lease), what
    :func:`create_store` would raise at once for a target no store is written over: a
    folder (:func:`dparallel.store._safety.refuse_foreign_folder`) or a URL holding
    something not a store's, or an input of the run (``protect``). A zarr store object
    passes (``create_store`` judges it)."""
    remote = remote_location(path)
    if isinstance(path, Location) and path.local is not None:
        path = path.local
    if remote is not None:
        refuse_remote_target(remote, [_as_written(p) for p in protect])
    elif isinstance(path, (str, os.PathLike)):
        refuse_foreign_folder(path, overwrite, [p for p in protect if not isinstance(p, Location)])


def _as_written(item: str | os.PathLike[str] | Location) -> str:
    """A protected input as a location's text (a URL normalised as stores' are)."""
    try:
        return str(as_location(item))
    except LocationError:
        return str(item)


def publish_store(store: Store) -> Store:
    """Swap (a folder) or publish (a URL) a complete replacement built aside; else ``store``.

    A complete store opened for writing first records its :meth:`Store.summary` (what
    ``info`` would otherwise read from every partition; docs/store-format.md).
    """
    if store.mode == "r+":
        summary = store.summary()
        if summary is not None and store.attrs.get("summary") != summary:
            store.update_attrs({"summary": summary})
    if store.root is not None:
        return publish_remote(store)
    return _create.publish_store(store)


def open_store(path: StoreTarget, mode: Literal["r", "r+"] = "r") -> Store:
    """Open an existing dparallel store (``mode="r"`` read-only, ``"r+"`` to write): a
    folder, a URL (at its current generation) or a zarr store."""
    remote = remote_location(path)
    if remote is None:
        return _create.open_store(path, mode)
    if not is_generation(remote.name) and resolve(remote) is None:  # a task's generation
        raise StoreError(f"store not found: {remote}")  # is opened with no request to ask
    return Store(remote, mode=mode)


def target_path(path: str | os.PathLike[str] | Store | Location) -> Path | Location:
    """What the user named: a store's URL, or the folder a store built aside replaces
    (:func:`dparallel.store._create.target_path`)."""
    if isinstance(path, Store):
        return path.target if path.root is not None else _create.target_path(path.path)
    remote = remote_location(path)
    if remote is not None:
        return remote
    return _create.target_path(path)  # type: ignore[arg-type]
