"""Which paths inside a store dparallel writes: its layout as a grammar, and what is foreign.

A store knows its own files, with or without their metadata. Every folder of a store has
a role fixed by where it lies (docs/store-format.md): the root and ``structures/``,
``partitions/``, ``atoms/``, ``parts/`` and ``parts/<p>/features/<d>/<E>[/d/<F>]`` are
groups, the arrays in them are arrays, and below ``parts/<p>`` (arrays a task writes with
``write_partition_arrays``, any names) a node's own ``zarr.json`` says which it is. A
group holds ``zarr.json`` and its children; an array holds ``zarr.json`` and chunk keys
(``c.0.1``; ``c/0/1`` in formats 1 and 2). A folder of the layout whose ``zarr.json`` is
not there yet (a task killed between an array's chunk and its metadata, which
:mod:`~dparallel.store._direct` writes last) is still ours, and so is a zarr write cut
short (``<key>.<32 hex>.partial``, the temporary name zarr and dparallel give a file
beside the key it becomes).

Anything else is foreign: a file where the layout has none (``structures/NOTES.txt``, a
chunk key in a group, ``zarr.json.bak`` in an array), a folder the layout cannot produce
(``parts/notes``, ``partitions/done/backup``), a symbolic link anywhere, a socket or FIFO.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from dparallel.config import read_json_object
from dparallel.store._layout import _FEATURE_ARRAYS, _PARTITION_ARRAYS, _STRUCTURE_ARRAYS

__all__ = ["STORE_ENTRIES", "foreign_files"]

#: Top-level entries of a dparallel store (``zarr.json`` and the groups create_store makes).
STORE_ENTRIES = frozenset({"zarr.json", "structures", "partitions", "parts", "atoms"})

_METADATA = "zarr.json"
#: Chunk keys of an array: ``c``, ``c.0``, ``c.0.1`` (format 3; ``c`` folder in 1 and 2).
_CHUNK_KEY = re.compile(r"c(?:\.\d+)*")
#: An index below a ``c/`` chunk folder (formats 1 and 2).
_INDEX = re.compile(r"\d+")
#: A temporary file for a key being written: zarr's (``Path.with_suffix(".<hex>.partial")``)
#: and dparallel's own (``<key>.<hex>.partial``, :func:`dparallel._files.temporary_name`).
_PARTIAL = re.compile(r"(?:zarr|zarr\.json|c(?:\.\d+)*|\d+)\.[0-9a-f]{32}\.partial")

_Role = Literal[
    "root",
    "structures",
    "partitions",
    "atoms",
    "parts",
    "part",
    "features",
    "descriptor",
    "element",
    "derivatives",
    "neighbor",
    "group",
    "array",
    "chunks",
    "node",
    "half",
]


def _node_type(folder: Path) -> str | None:
    """``"group"`` or ``"array"`` as the folder's ``zarr.json`` says; ``None`` without one."""
    kind = read_json_object(folder / _METADATA).get("node_type")
    return kind if kind in ("group", "array") else None


def _file_is_ours(role: _Role, name: str) -> bool:
    """Whether a file ``name`` is one dparallel writes in a folder of ``role``."""
    if _PARTIAL.fullmatch(name):
        return True
    if role == "chunks":
        return bool(_INDEX.fullmatch(name))
    if name == _METADATA:
        return True
    return role in ("array", "half") and bool(_CHUNK_KEY.fullmatch(name))


def _child_role(role: _Role, name: str, folder: Path) -> _Role | None:
    """The role of the folder ``name`` (at ``folder``) inside one of ``role``; ``None`` if
    the layout has no such folder."""
    if role == "root":
        return name if name in STORE_ENTRIES - {_METADATA} else None  # type: ignore[return-value]
    if role in ("structures", "partitions"):
        known = _STRUCTURE_ARRAYS if role == "structures" else _PARTITION_ARRAYS
        # an array of another format version is ours when its metadata says it is one
        return "array" if name in known or _node_type(folder) == "array" else None
    if role == "atoms":
        return "array"
    if role == "parts":
        return "part" if _INDEX.fullmatch(name) else None
    if role == "part":
        return "features" if name == "features" else _resolved(folder)
    if role == "features":
        return "descriptor"
    if role == "descriptor":
        return "element"
    if role == "element":
        if name in _FEATURE_ARRAYS:
            return "array"
        return "derivatives" if name == "d" else None
    if role == "derivatives":
        return "neighbor"
    if role == "neighbor":
        return "array"
    if role == "array":
        return "chunks" if name == "c" else None
    if role == "chunks":
        return "chunks" if _INDEX.fullmatch(name) else None
    if role in ("group", "half"):
        return _resolved(folder)
    return None


def _resolved(folder: Path) -> _Role:
    """A node that ``write_partition_arrays`` may have made (any name): what its metadata
    says, or a node half made (no readable ``zarr.json`` yet)."""
    kind = _node_type(folder)
    return "group" if kind == "group" else "array" if kind == "array" else "half"


def _everything(folder: Path, store: Path, out: list[str]) -> None:
    """Every entry below the foreign ``folder`` (itself if it is empty), never following
    links."""
    before = len(out)
    for entry in os.scandir(folder):
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            _everything(path, store, out)
        else:
            out.append(path.relative_to(store).as_posix())
    if len(out) == before:
        out.append(folder.relative_to(store).as_posix() + "/")


def _walk(folder: Path, role: _Role, store: Path, out: list[str]) -> None:
    """Append to ``out`` what below ``folder`` (a folder of ``role``) dparallel did not write."""
    for entry in os.scandir(folder):
        path = Path(entry.path)
        where = path.relative_to(store).as_posix()
        if entry.is_symlink():
            out.append(where)
        elif entry.is_dir(follow_symlinks=False):
            child = _child_role(role, entry.name, path)
            if child is None:
                _everything(path, store, out)
            else:
                _walk(path, child, store, out)
        elif not entry.is_file(follow_symlinks=False) or not _file_is_ours(role, entry.name):
            out.append(where)


def foreign_files(path: Path) -> list[str]:
    """Entries of the store at ``path``, at any depth, that dparallel did not write.

    Relative POSIX paths, sorted: every foreign file, link or special file, and a foreign
    folder's files (the folder itself, ``name/``, if it is empty). What the layout can
    produce is recognised with or without its metadata (see the module docstring).
    """
    out: list[str] = []
    _walk(Path(path), "root", Path(path), out)
    return sorted(out)
