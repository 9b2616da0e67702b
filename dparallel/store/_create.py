"""Create, reopen or replace a store, and the one predicate of whether a store is current.

:func:`store_status` compares what is at a path with a source fingerprint, a config and a
plan; :func:`create_store` (every writer) and ``dparallel run`` (is featurization needed?)
both decide with it. A new store is built beside its target (``<name>.creating-…``)
and renamed into place only once complete; when it replaces an old store (``overwrite``),
the old one stays until that moment and only provably dparallel stores are replaced
(:func:`~dparallel.store._safety.check_replaceable`). Everything runs under the store's
lease (:class:`~dparallel.store._lease.StoreLease`), which also makes leftovers of
interrupted creations safe to remove.
"""

from __future__ import annotations

import datetime as _dt
import errno
import logging
import os
import re
import secrets
import shutil
import socket
import uuid
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import zarr
from zarr.core.sync import sync

from dparallel._files import raise_if_disk_full
from dparallel.config import differences
from dparallel.descriptors.registry import current_spec_keys
from dparallel.errors import StoreBusyError, StoreError, StoreMismatchError
from dparallel.store._backend import StoreTarget, open_backend, store_folder
from dparallel.store._dims import structure_dims
from dparallel.store._layout import (
    _PARTITION_ARRAYS,
    _STRUCTURE_ARRAYS,
    CHUNK_KEYS,
    FORMAT_VERSION,
    SOURCE_IDENTITY_KEYS,
    ZARR3,
    _compressors,
    _jsonable,
)
from dparallel.store._lease import StoreLease
from dparallel.store._safety import check_replaceable, not_ours, store_format
from dparallel.store._store import Store

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from dparallel.store.plan import Plan

__all__ = ["StoreStatus", "create_store", "open_store", "publish_store", "store_status"]

log = logging.getLogger(__name__)

_Kind = Literal["missing", "empty", "foreign", "other_format", "store"]
#: How a refusal names the option that replaces a store (the Python API's and most commands').
OVERWRITE_OPTION = "overwrite=True (--overwrite)"


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("dparallel", "torch", "zarr", "numpy", "ase"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            if pkg == "dparallel":
                from dparallel import __version__

                out[pkg] = __version__
            else:
                out[pkg] = "not installed"
    return out


def _identity(fp: Mapping[str, Any]) -> dict[str, Any]:
    return {k: fp.get(k) for k in SOURCE_IDENTITY_KEYS}


def _changed_keys(old: Any, new: Any) -> list[str]:
    """Dotted keys whose values differ (down to 3 levels; :func:`config.differences`)."""
    return [key or "(whole value)" for key, _, _ in differences(old, new, depth=3)]


def _without_partitioning(config: Any) -> Any:
    """``config`` without ``ingest.partition_atoms`` (compared only when given explicitly)."""
    if not isinstance(config, dict) or not isinstance(config.get("ingest"), dict):
        return config
    ingest = {k: v for k, v in config["ingest"].items() if k != "partition_atoms"}
    return {**config, "ingest": ingest}


def _current_keys(config: Any) -> Any:
    """``config`` as this version writes it: ACSF specs written before the one descriptor
    key (``{"kind": "acsf"}``) read as ``{"type": "acsf"}``, so those stores resume."""
    if isinstance(config, dict):
        return current_spec_keys({k: _current_keys(v) for k, v in config.items()})
    if isinstance(config, list):
        return [_current_keys(v) for v in config]
    return config


def _differences(
    meta: Mapping[str, Any], fingerprint: Mapping[str, Any] | None, config: Any, plan: Plan | None
) -> list[str]:
    """Why a store's attributes do not belong to this source, config and plan (empty: they do).

    ``plan=None`` (partitioning derived, not given): any partitioning of this source and
    config matches, so neither the plan nor ``ingest.partition_atoms`` is compared.
    ``fingerprint=None`` (the source not read): only the sections ``config`` gives are.
    """
    diffs = []
    old_config = _current_keys(meta.get("config"))
    if fingerprint is None and isinstance(old_config, dict):
        old_config = {key: old_config.get(key) for key in config}
    elif plan is None:
        old_config, config = _without_partitioning(old_config), _without_partitioning(config)
    source = meta.get("source", {})
    if fingerprint is not None and _identity(source) != _identity(fingerprint):
        fields = ", ".join(_changed_keys(_identity(source), _identity(fingerprint)))
        diffs.append(
            f"source {source.get('path')} ≠ {fingerprint.get('path')} (content differs: {fields})"
        )
    if old_config != config:
        diffs.append("config differs in " + ", ".join(_changed_keys(old_config, config)))
    if plan is not None and meta.get("plan") != _jsonable(plan.to_dict()):
        diffs.append("partition plan differs")
    return diffs


@dataclass(frozen=True)
class StoreStatus:
    """What is at a store path, compared with a source, config and plan.

    ``kind``: ``"missing"`` (nothing), ``"empty"`` (an empty directory), ``"foreign"``
    (a file or a folder that is not a dparallel store), ``"other_format"`` (a dparallel
    store of another format version) or ``"store"``. ``differences`` says why a store
    was made from something else; ``complete`` whether all its partitions are done.
    """

    path: Path
    kind: _Kind
    differences: tuple[str, ...] = ()
    complete: bool = False
    attrs: dict[str, Any] = field(default_factory=dict, repr=False)
    format_version: int | None = None

    @property
    def matches(self) -> bool:
        """A store made from this source, config and plan (resumable as it is)."""
        return self.kind == "store" and not self.differences

    @property
    def current(self) -> bool:
        """A matching store with every partition done."""
        return self.matches and self.complete

    def mismatch_error(self) -> StoreMismatchError:
        """The error that refuses it; it names :data:`OVERWRITE_OPTION` (only for a store),
        which a caller that spells the option otherwise renames
        (:meth:`StoreMismatchError.naming`)."""
        where = str(self.path)
        if self.kind == "foreign":
            return StoreMismatchError(not_ours(self.path))
        if self.kind == "other_format":
            before = (
                f"{where} is a dparallel store of format {self.format_version}, this dparallel "
                f"writes format {FORMAT_VERSION}; pass "
            )
            after = " to replace it"
        else:
            before = f"{where} was made from another source or config: "
            before += f"{'; '.join(self.differences)}. Pass "
            after = " to replace it."
        return StoreMismatchError.naming_option(before, OVERWRITE_OPTION, after)


def store_status(
    path: StoreTarget,
    *,
    source_fingerprint: Mapping[str, Any] | None,
    config: Mapping[str, Any],
    plan: Plan | None,
) -> StoreStatus:
    """Compare what is at ``path`` with a source, config and plan (reads metadata only).

    This is the one test of whether a store belongs to a run: :func:`create_store`
    reopens a store only if it :attr:`~StoreStatus.matches`, and ``dparallel run``
    skips featurization only if it is :attr:`~StoreStatus.current`. ``plan=None``: the
    run derives its partitioning (from the data and its workers), so a store of any
    partitioning matches; ``ingest.partition_atoms`` is then not compared either.
    ``source_fingerprint=None``: what is known before the source is read (the sections
    ``config`` gives: ``{"features": …}``, no source, no plan).
    """
    target = store_folder(path)
    if target is None:
        raise StoreError(f"store_status compares a folder; {path} is not one (open_store it)")
    if not (target.exists() or target.is_symlink()):
        return StoreStatus(target, "missing")
    if target.is_dir() and not any(os.scandir(target)):
        return StoreStatus(target, "empty")
    version = store_format(target) if target.is_dir() else None
    if version is None:
        return StoreStatus(target, "foreign")
    if version != FORMAT_VERSION:
        return StoreStatus(target, "other_format", format_version=version)
    try:
        store = Store(target, mode="r")
    except StoreError:
        return StoreStatus(target, "foreign")
    return status_of(target, store, source_fingerprint, config, plan)


def status_of(
    where: Any, store: Store, fingerprint: Mapping[str, Any] | None, config: Any, plan: Plan | None
) -> StoreStatus:
    """The status of an opened dparallel ``store`` of this format at ``where``."""
    meta = store.attrs
    given = None if fingerprint is None else _jsonable(fingerprint)
    diffs = _differences(meta, given, _jsonable(config), plan)
    return StoreStatus(
        where,
        "store",
        differences=tuple(diffs),
        complete=store.is_complete,
        attrs=meta,
        format_version=meta.get("format_version"),
    )


_LEFTOVER = r"\.(creating|replaced)-[A-Za-z0-9._-]+"

#: Stores this process builds aside to replace another (building path → target, token).
_ASIDE: dict[Path, tuple[Path, str]] = {}


def target_path(path: str | os.PathLike[str]) -> Path:
    """The path the user asked for: the target of a store built aside to replace it
    (``<name>.creating-…`` → ``<name>``, see :func:`create_store`), else ``path`` itself.

    What progress, log lines, messages and the dashboard show: the folder being built is
    an implementation detail of ``--overwrite``.
    """
    given = Path(path)
    aside = _ASIDE.get(given.resolve())
    if aside is not None:
        return aside[0]
    match = re.fullmatch(r"(.+)\.creating-[A-Za-z0-9._-]+", given.name)
    return given.with_name(match.group(1)) if match else given


def _remove_leftovers(path: Path) -> None:
    """Remove what interrupted creations left beside ``path`` (call it holding the lease)."""
    pattern = re.compile(re.escape(path.name) + _LEFTOVER)
    try:
        siblings = list(os.scandir(path.parent))
    except OSError:
        return
    for entry in siblings:
        if pattern.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
            log.info("removing %s, left by an interrupted store creation", entry.path)
            shutil.rmtree(entry.path, ignore_errors=True)


def _adopt_aside(path: Path, fingerprint: dict, config: dict, plan: Plan | None) -> Store | None:
    """A replacement of ``path`` begun aside by an earlier run with this source, config and
    plan (``plan=None``: any), registered to be swapped in when complete; else ``None``.

    Call it holding the lease. A skeleton whose build was cut short has no ``dparallel``
    attributes yet (they are written last), so it never matches.
    """
    pattern = re.compile(re.escape(path.name) + r"\.creating-([A-Za-z0-9._-]+)")
    try:
        siblings = sorted(os.scandir(path.parent), key=lambda e: e.name)
    except OSError:
        return None
    for entry in siblings:
        match = pattern.fullmatch(entry.name)
        if not match or not entry.is_dir(follow_symlinks=False):
            continue
        building = Path(entry.path)
        status = store_status(building, source_fingerprint=fingerprint, config=config, plan=plan)
        if status.matches:
            _ASIDE[building] = (path, match.group(1))
            log.info("resuming the replacement of %s begun aside at %s", path, building)
            return Store(building, mode="r+")
    return None


def _build(building: Path | StoreTarget, fingerprint: dict, config: dict, plan: Plan) -> None:
    """Write an empty store (every array at final shape) at ``building`` (a folder or a
    zarr store)."""
    A, K = plan.slots
    P = plan.n_partitions
    where = str(building) if isinstance(building, Path) else building
    root = zarr.open_group(store=where, mode="w", **ZARR3)
    for name, (axis, trailing, dtype, fill) in _STRUCTURE_ARRAYS.items():
        cap = A if axis == "atom" else K
        root.create_array(
            f"structures/{name}",
            shape=(P * cap, *trailing),
            chunks=(cap, *trailing),
            dtype=dtype,
            fill_value=fill,
            compressors=_compressors(dtype),
            chunk_key_encoding=CHUNK_KEYS,
            dimension_names=structure_dims(name, axis, 1 + len(trailing)),
        )
    for name, (trailing, dtype) in _PARTITION_ARRAYS.items():
        root.create_array(
            f"partitions/{name}",
            shape=(P, *trailing),
            chunks=(1, *trailing),
            dtype=dtype,
            fill_value=0,
            compressors=_compressors(dtype),
            chunk_key_encoding=CHUNK_KEYS,
            dimension_names=structure_dims(name, "partition", 1 + len(trailing)),
        )
    root.create_group("parts")
    root.create_group("atoms")
    root.attrs["dparallel"] = {
        "format_version": FORMAT_VERSION,
        "versions": _versions(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "identity": uuid.uuid4().hex,  # new with every store made: see store_identity
        "source": fingerprint,
        "config": config,
        "plan": plan.to_dict(),
        "slots": {"atoms": A, "structures": K},
        # every chunk of numbers a done partition wrote is stored, fill values too (older
        # stores left all-fill chunks out): a missing one is damage (OpenedStore)
        "every_chunk_written": True,
    }


def _swap_in(building: Path, path: Path, token: str, replace: bool) -> None:
    """Rename the finished ``building`` to ``path``; an old store there goes only then."""
    if not replace:
        try:
            os.rename(building, path)  # also onto an empty directory
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
                raise StoreBusyError(
                    f"{path} appeared while this run was creating it (another run without "
                    "the lease, or a user); nothing was changed there: rerun to use it"
                ) from None
            raise
        return
    old = path.with_name(f"{path.name}.replaced-{token}")
    os.rename(path, old)
    try:
        os.rename(building, path)
    except BaseException:
        os.rename(old, path)
        raise
    shutil.rmtree(old, ignore_errors=True)


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
    """Create a store with every structure array at final shape, or reopen a matching one.

    Parameters
    ----------
    path
        Directory of the zarr store (a new path or an empty directory; with ``overwrite``,
        also a dparallel store). Or a zarr store or URL that is not a folder (e.g. a
        ``zarr.storage.MemoryStore``): built in place, with no lease and no ``overwrite``
        (see :func:`_create_in_place`).
    source_fingerprint
        ``StructureSource.fingerprint()``; its identity fields must match on reopen, and
        its ``path`` is never replaced.
    plan
        Partitions (:func:`dparallel.store.plan_partitions`).
    config
        Validated, JSON-serialisable config; must match on reopen.
    overwrite
        Replace a dparallel store made from another source or config (or the same: start
        over). Never replaces anything else (see :func:`check_replaceable`).
    protect
        More files the run reads (workflow, descriptors): ``path`` may not be or hold them.
    any_plan
        ``plan`` was derived (not given): reopen a store of this source and config
        whatever its partitioning (see :func:`store_status` with ``plan=None``).
    aside
        When a store is replaced: return the new one still beside its target
        (``<name>.creating-…``), so that partitions are written there too, and leave the
        old store in place until :func:`publish_store` swaps the complete new one in.
        Until then a failed or interrupted run leaves the old store as it was, and the
        same call again resumes the replacement where it stopped.

    Returns
    -------
    Store
        Open for writing (``mode="r+"``). An existing store made from the same source,
        config and plan is returned as it is, so done partitions are kept (resume).

    Raises
    ------
    StoreMismatchError
        The path holds another store (without ``overwrite``) or something that is not a
        dparallel store.
    UnsafePathError
        ``overwrite`` would replace the root, home or working directory or an input.
    StoreBusyError
        Another run holds the store's lease.
    """
    if (local := store_folder(path)) is None:  # not a folder: no lease, no build aside, rename
        return _create_in_place(path, source_fingerprint, plan, config, overwrite, any_plan)
    path = local
    config = _jsonable(config)
    fingerprint = _jsonable(source_fingerprint)
    protected = [*protect, *([fingerprint["path"]] if fingerprint.get("path") else [])]
    compared = None if any_plan else plan
    decide = partial(_decide, path, fingerprint, config, compared, overwrite, protected)
    if path.exists() or path.is_symlink():
        decide()  # refuse early, before even the lock file is made beside ``path``
    with StoreLease(path, command="create_store"):
        status = decide()  # again: only now, holding the lease, is the answer final
        # a replacement an earlier run began aside, of this very config: resume it
        keep = status is not None and aside and status.kind not in ("missing", "empty")
        if keep and (adopted := _adopt_aside(path, fingerprint, config, compared)) is not None:
            return adopted
        _remove_leftovers(path)
        if status is None:
            return Store(path, mode="r+")
        new = _build_beside(path, fingerprint, config, plan, status.kind != "missing", keep)
    return Store(new, mode="r+")


def _decide(
    path: Path, fingerprint: dict, config: dict, plan: Plan | None, overwrite: bool, protected: list
) -> StoreStatus | None:
    """The status when a new store is to be built at ``path``; ``None``: reopen it
    (``plan=None``: whatever its partitioning)."""
    status = store_status(path, source_fingerprint=fingerprint, config=config, plan=plan)
    if status.kind in ("missing", "empty") or overwrite:
        if status.kind != "missing":
            check_replaceable(path, protected)
        return status
    if status.matches:
        return None
    if status.kind != "foreign":  # the flag would refuse it too: say why, not the flag
        check_replaceable(path, protected)
    raise status.mismatch_error()


def _build_beside(
    path: Path, fingerprint: dict, config: dict, plan: Plan, replace: bool, keep: bool
) -> Path:
    """Build the new store beside ``path`` and swap it in (``replace``: over the old one);
    with ``keep``, leave it there for :func:`publish_store`. Returns where it is."""
    token = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    building = path.with_name(f"{path.name}.creating-{token}")
    try:
        _build(building, fingerprint, config, plan)
        if keep:
            _ASIDE[building] = (path, token)
            log.info("building the replacement of %s aside, at %s", path, building)
            return building
        _swap_in(building, path, token, replace)
    except OSError as exc:  # zarr's own writes: the store named, not a bare errno
        raise_if_disk_full(exc, path, None)
        raise
    finally:
        if building.exists() and building not in _ASIDE:
            shutil.rmtree(building, ignore_errors=True)
    log.info("created store %s: %d partitions, slots %s", path, plan.n_partitions, plan.slots)
    return path


def _create_in_place(
    target: StoreTarget,
    fingerprint: Mapping[str, Any],
    plan: Plan,
    config: Mapping[str, Any],
    overwrite: bool,
    any_plan: bool,
) -> Store:
    """:func:`create_store` in a zarr store that is not a folder (e.g. a ``MemoryStore``).

    What a folder gets from the file system has no equivalent here: no lease (one writing
    run at a time is the caller's to ensure), no build aside then rename (the layout is
    written in place), so nothing already there is replaced: a matching store is reopened,
    an empty zarr store built in, anything else refused.
    """
    try:
        store = Store(target, mode="r+")
    except StoreError:
        store = None
    if store is not None:
        diffs = _differences(
            store.attrs, _jsonable(fingerprint), _jsonable(config), None if any_plan else plan
        )
        if not diffs and not overwrite:
            return store
        raise StoreMismatchError(
            f"{store.location} holds a dparallel store ({'; '.join(diffs) or 'overwrite'}); "
            "a store that is not a folder is never replaced: empty it yourself, or use a path"
        )
    backend = open_backend(target, "r+")
    if sync(_has_keys(backend.zarr_store)):
        raise StoreMismatchError(
            f"{backend.location} is not empty and holds no dparallel store of format "
            f"{FORMAT_VERSION}; dparallel builds a store only in an empty zarr store"
        )
    _build(backend.zarr_store, _jsonable(fingerprint), _jsonable(config), plan)
    log.info(
        "created store %s: %d partitions, slots %s", backend.location, plan.n_partitions, plan.slots
    )
    return Store(backend.zarr_store, mode="r+")


async def _has_keys(store: Any) -> bool:
    """Whether the zarr ``store`` holds anything."""
    async for _ in store.list():
        return True
    return False


def publish_store(store: Store) -> Store:
    """Swap a complete store built aside (``create_store(aside=True)``) in; else ``store``.

    Call it holding the target's lease. The old store is removed only once the new one
    has taken its place; an incomplete store stays aside (the old one stays in place,
    and the next creation at the target removes the leftover).
    """
    building = Path(store.path).resolve()
    if building not in _ASIDE or not store.is_complete:
        return store
    path, token = _ASIDE.pop(building)
    _swap_in(building, path, token, replace=path.exists() or path.is_symlink())
    log.info("replaced %s with the store built aside", path)
    return Store(path, mode="r+")


def open_store(path: StoreTarget, mode: Literal["r", "r+"] = "r") -> Store:
    """Open an existing dparallel store (``mode="r"`` read-only, ``"r+"`` to write): a
    folder, a URL or a zarr store."""
    local = store_folder(path)
    if local is None:
        return Store(path, mode=mode)
    if not local.exists():
        raise StoreError(f"store not found: {local}")
    return Store(local, mode=mode)
