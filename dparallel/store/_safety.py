"""What dparallel may replace: only its own stores (or an empty directory), never more.

:func:`check_replaceable` is asked before anything at a store path is replaced
(``overwrite=True``). It refuses the filesystem root, the home directory, the working
directory and every folder above them, any path that is or holds a protected file (the
input, the workflow or descriptors file), anything that is not provably a dparallel store,
and a store that holds files dparallel did not write (:mod:`~dparallel.store._own_files`).
Paths are compared after resolving symbolic links, so a link cannot smuggle one of these
past the checks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from dparallel._files import file_in_the_way, sample_names
from dparallel.config import read_json_object
from dparallel.errors import StoreMismatchError, UnsafePathError
from dparallel.store._own_files import STORE_ENTRIES, foreign_files

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "STORE_ENTRIES",
    "check_not_dangerous",
    "check_replaceable",
    "foreign_files",
    "is_dparallel_store",
    "not_ours",
    "refuse_foreign_folder",
    "store_format",
]


def store_format(path: Path) -> int | None:
    """The ``format_version`` of the dparallel store at ``path``, or ``None`` if it is none.

    A dparallel store is a directory holding a zarr v3 group whose root attributes carry a
    ``dparallel`` block with a ``format_version`` (read from ``zarr.json`` directly, so
    any version, old or new, is recognised).
    """
    doc = read_json_object(path / "zarr.json")
    if doc.get("node_type") != "group":
        return None
    attrs = doc.get("attributes")
    block = attrs.get("dparallel") if isinstance(attrs, dict) else None
    version = block.get("format_version") if isinstance(block, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def is_dparallel_store(path: Path) -> bool:
    """Whether ``path`` is a directory holding a dparallel store (see :func:`store_format`)."""
    return path.is_dir() and store_format(path) is not None


def _homes() -> set[Path]:
    """The home directory as ``~`` and as ``$HOME`` say it (they may differ), resolved."""
    out = set()
    for text in (os.environ.get("HOME"), os.path.expanduser("~")):
        if text:
            out.add(Path(text).resolve())
    return out


def _within(inner: Path, outer: Path) -> bool:
    """``inner`` is ``outer`` or lies below it."""
    return inner == outer or outer in inner.parents


def _danger(target: Path, protect: Iterable[str | os.PathLike[str]]) -> str | None:
    """Why ``target`` (resolved) must never be replaced, or ``None``."""
    if target.parent == target:
        return "it is the filesystem root"
    if os.path.ismount(target):
        return "it is a mount point (the root of a filesystem)"
    for home in _homes():
        if _within(home, target):
            return (
                "it is your home directory"
                if home == target
                else (f"it holds your home directory {home}")
            )
    cwd = Path.cwd().resolve()
    if _within(cwd, target):
        return (
            "it is the working directory"
            if cwd == target
            else (f"it holds the working directory {cwd}")
        )
    for item in protect:
        given = Path(item).expanduser().absolute()
        for form in {given, given.resolve()}:
            if _within(form, target):
                return f"it is or holds {given}, which this run reads"
    return None


def not_ours(path: str | os.PathLike[str]) -> str:
    """Why ``path`` (a file, or a folder without a readable dparallel store) is not replaced.

    Never suggests ``--overwrite``: that cannot replace what is not provably a store.
    """
    given = Path(path)
    advice = "choose another output path, or move it away yourself"
    target = given.expanduser().resolve()
    if not target.is_dir():
        return (
            f"{given} is a file, not a dparallel store; dparallel writes only into a new "
            f"path, an empty directory or its own stores: {advice}"
        )
    entries = {entry.name for entry in os.scandir(target)}
    if "zarr.json" in entries and entries <= STORE_ENTRIES:
        return (
            f"{given} looks like a damaged dparallel store (its zarr.json cannot be read as "
            "one), so it is not provably a store and is not replaced: remove it yourself "
            f"if it is (rm -r {given}), or {advice}"
        )
    return (
        f"{given} exists and is not a dparallel store (it holds {sample_names(entries)}); "
        f"dparallel writes only into a new path, an empty directory or its own stores: "
        f"{advice}"
    )


def check_not_dangerous(
    path: str | os.PathLike[str], protect: Iterable[str | os.PathLike[str]] = ()
) -> Path:
    """Raise :class:`UnsafePathError` if ``path`` must never be written over; returns it resolved.

    Refused: the filesystem root, the home directory (``~`` and ``$HOME``), the working
    directory, any folder above them, and any path that is or holds a ``protect`` file.
    """
    given = Path(path).expanduser()
    target = given.resolve()
    reason = _danger(target, protect)
    if reason is not None:
        raise UnsafePathError(f"refusing to replace {given}: {reason}")
    return target


def refuse_foreign_folder(
    path: str | os.PathLike[str],
    overwrite: bool = False,
    protect: Iterable[str | os.PathLike[str]] = (),
) -> None:
    """Raise what :func:`~dparallel.store.create_store` would raise for a folder target
    holding something that is neither an empty directory nor a dparallel store (with
    ``overwrite`` or without, it is never written over), before a run starts anything
    (a cluster, a log file beside it); anything else is left to ``create_store``. A path
    below a file, or inside a dparallel store (the new store would be written into the
    old one's folder), is an :class:`UnsafePathError`.
    ``protect``: the files the run reads, as ``create_store`` is given them."""
    target = Path(path).expanduser().resolve()
    in_the_way = file_in_the_way(target)
    for above in target.parents:  # a file in the way, or a store it would be written into
        why = "is a file, not a folder" if above == in_the_way else None
        if why is None and store_format(above) is not None:
            why = "is a dparallel store"
        if why is not None:
            raise UnsafePathError(
                f"refusing to write a store at {path}: {above} {why}; choose a path outside it"
            )
    if not (target.exists() or target.is_symlink()):
        return
    if target.is_dir() and (not any(os.scandir(target)) or store_format(target) is not None):
        return
    if overwrite:
        check_not_dangerous(target, protect)  # the reason create_store gives when replacing
    raise StoreMismatchError(not_ours(target))


def check_replaceable(
    path: str | os.PathLike[str], protect: Iterable[str | os.PathLike[str]] = ()
) -> Path:
    """Raise unless whatever is at ``path`` may be replaced by a new store; returns it resolved.

    Allowed: nothing at ``path``, an empty directory, or a dparallel store (any format
    version) holding only what dparallel writes. ``protect`` lists files the run reads.

    Raises
    ------
    UnsafePathError
        ``path`` is (or holds) the filesystem root, the home or working directory, or a
        protected file.
    StoreMismatchError
        ``path`` holds something that is not a dparallel store (a file, a folder with other
        content) or a store with foreign files in it. The message never suggests
        ``--overwrite``: that flag cannot replace what is not a store.
    """
    given = Path(path).expanduser()
    target = check_not_dangerous(given, protect)
    if not (target.exists() or target.is_symlink()):
        return target
    if not target.is_dir():
        raise StoreMismatchError(not_ours(given))
    entries = {entry.name for entry in os.scandir(target)}
    if not entries:
        return target
    if store_format(target) is None:
        raise StoreMismatchError(not_ours(given))
    foreign = foreign_files(target)
    if foreign:
        raise StoreMismatchError(
            f"{given} is a dparallel store but also holds files dparallel did not write "
            f"({sample_names(foreign)}); move them out first"
        )
    return target
