"""``dparallel info --verify``: every chunk a done partition should have, read and decoded.

``info`` reads the done markers and counts; a chunk deleted or torn after its partition was
marked done is met only by the read that needs it (a :class:`~dparallel.errors.StoreError`
in training, hours later). :func:`verify_store` lists, for every done partition, each chunk
it wrote (its rows of every ``structures/``, ``partitions/`` and ``atoms/`` array, and
every chunk of every array under ``parts/<p>``, where the descriptors of the store's
config and the partition's elements say which arrays must be there), reads them all
(:mod:`~dparallel.store._chunks`: a folder's files directly, an object store's
concurrently) and decodes each one. Its cost is reading the whole store once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from math import ceil
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from zarr.core.sync import sync

from dparallel.store._batch import _parsed, keys_below
from dparallel.store._chunks import CONCURRENCY, chunk_decoder, read_keys
from dparallel.store._layout import (
    _PARTITION_ARRAYS,
    _STRUCTURE_ARRAYS,
    _partition_group,
    remake_advice,
    repair_advice,
)
from dparallel.store._read_cache import CachedReads
from dparallel.store.stats import FEATURE_LIMIT, out_of_range

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from dparallel.store._opened import OpenedStore

__all__ = ["Problem", "Verification", "verify_store"]

#: The arrays of a derivative block in format 3 (docs/store-format.md, "Features").
_BLOCK_ARRAYS = ("pairs", "vectors_t", "dG_dr_split")


@dataclass(frozen=True)
class Problem:
    """One chunk (or array) a done partition should have that is missing or unreadable."""

    partition: int | None  # None: an array of the whole store (its zarr.json)
    array: str
    chunk: str | None  # its key in the array, e.g. ``c.3.0``; None: the array itself
    problem: str  # "missing", "unreadable: why", or "not finite: how many" (features)
    group: bool = False  # ``array`` names a group (its zarr.json), not an array

    @property
    def kind(self) -> str:
        """``missing``, ``unreadable`` or ``not finite``: ``problem`` up to its detail."""
        return self.problem.split(":")[0].split(" (")[0]

    def line(self) -> str:
        """``partition 3: parts/3/…/values: chunk c.0.0 missing``."""
        where = "store" if self.partition is None else f"partition {self.partition}"
        what = ("group" if self.group else "array") if self.chunk is None else f"chunk {self.chunk}"
        return f"{where}: {self.array}: {what} {self.problem}"


@dataclass(frozen=True)
class Verification:
    """What :func:`verify_store` checked and what it found."""

    partitions: int  # done partitions checked
    chunks: int  # chunks read and decoded
    problems: tuple[Problem, ...]
    #: False for a store made before every chunk of numbers was stored: an all-fill chunk
    #: was left out, so a missing one is not reported (it may be fill values)
    missing_checked: bool
    #: The command that made the store, which remakes a damaged one: featurize or ingest
    made_by: str = "featurize"

    @property
    def advice(self) -> str:
        """What mends what was found: ``--repair`` where every problem is a partition's,
        else making the store again."""
        if any(p.partition is None for p in self.problems):
            return remake_advice(self.made_by)
        return repair_advice(self.made_by)

    @property
    def ok(self) -> bool:
        """Nothing missing or unreadable."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """As ``info --json --verify`` prints it."""
        return {
            "ok": self.ok,
            "partitions_checked": self.partitions,
            "chunks_checked": self.chunks,
            "missing_checked": self.missing_checked,
            "problems": [
                {"partition": p.partition, "array": p.array, "chunk": p.chunk, "problem": p.problem}
                for p in self.problems
            ],
        }


def verify_store(store: OpenedStore) -> Verification:
    """Read and decode every chunk the done partitions of ``store`` should have."""
    from ase.data import chemical_symbols

    done = store._done_flags()
    parts = [int(p) for p in np.flatnonzero(done)]
    strict = bool(store._meta.get("every_chunk_written"))
    problems = _check_groups(store, _SHARED_GROUPS, None, "")
    chunks = 0
    for name, array in _shared_arrays(store, problems):
        n, found = _check_shared(store, name, array, parts, strict)
        chunks += n
        problems += found
    elements = _elements(store)
    base, prefix = _where(store)
    listed = sync(keys_below(base, f"{prefix}parts/")) if parts else []
    by_partition: dict[int, list[str]] = {}
    for key in listed:
        rest = key[len(prefix) :].split("/", 2)  # parts, <p>, …
        if len(rest) == 3 and rest[1].isdigit():
            by_partition.setdefault(int(rest[1]), []).append(rest[2])
    for p in parts:
        present = [chemical_symbols[z] for z in np.flatnonzero(elements[p])]
        n, found = _check_partition(store, p, by_partition.get(p, []), present, strict)
        chunks += n
        problems += found
    problems.sort(
        key=lambda q: (-1 if q.partition is None else q.partition, q.array, q.chunk or "")
    )
    return Verification(len(parts), chunks, tuple(problems), strict, store.made_by)


def _where(store: OpenedStore) -> tuple[Any, str]:
    """The zarr store to read (past a read cache: everything is read once, afresh) and the
    prefix of the store's root in it (``""`` or ``"path/"``)."""
    root = store._root.store_path
    base = root.store
    if isinstance(base, CachedReads):
        base = base.unwrapped()
    return base, f"{root.path}/".lstrip("/")


def _elements(store: OpenedStore) -> np.ndarray:
    """(P, 119) bool ``partitions/elements``; no elements where its chunk cannot be read
    (the check of the shared arrays reports it)."""
    name = "partitions/elements"
    try:
        array = store._array(name)
        read = store._partition_chunks(name, array)
        return read[0] if read is not None else np.asarray(array[...], bool)
    except Exception:  # noqa: BLE001 - reported by the shared arrays' check
        return np.zeros((store.n_partitions, 119), bool)


def _is_text(meta: Any) -> bool:
    """Whether the array holds strings (a chunk of empty ones is left out, as zarr does)."""
    return meta.data_type.to_native_dtype().kind in "OUST"


#: The groups below the root of every store (docs/store-format.md, "Arrays"); the root's
#: own zarr.json is read when the store is opened.
_SHARED_GROUPS = ("structures", "partitions", "atoms", "parts")


def _check_groups(
    store: OpenedStore, groups: Iterable[str], p: int | None, below: str
) -> list[Problem]:
    """A problem for each of ``groups`` (paths below ``below``, ``""`` itself) whose
    zarr.json is missing or is no group's: zarr reads through a lost group document,
    xarray and other zarr readers cannot (``xarray.open_zarr(STORE, group=…)``)."""
    base, root = _where(store)
    names = [_below(below, g) for g in sorted(groups)]
    found = read_keys(base, [f"{root}{name}/zarr.json" for name in names])
    problems = []
    for name, text in zip(names, found, strict=True):
        why = "missing (no zarr.json)" if text is None else _not_a_group(text)
        if why is not None:
            problems.append(Problem(p, name, None, why, group=True))
    return problems


def _below(parent: str, path: str) -> str:
    """``parent/path``; ``parent`` for ``path`` ``""``, ``path`` for ``parent`` ``""``."""
    return "/".join(part for part in (parent, path) if part)


def _not_a_group(text: bytes) -> str | None:
    """Why ``text`` is no zarr v3 group document (``None`` where it is one)."""
    try:
        document = json.loads(text)
    except Exception as exc:  # noqa: BLE001 - a torn document: any parser's error
        return f"unreadable: {_why(exc)}"
    if not isinstance(document, dict) or document.get("node_type") != "group":
        kind = document.get("node_type") if isinstance(document, dict) else None
        return f"unreadable: not a group's zarr.json (node_type {kind!r})"
    return None


def _shared_arrays(store: OpenedStore, problems: list[Problem]) -> Iterator[tuple[str, zarr.Array]]:
    """The arrays with a chunk per partition: ``structures/``, ``partitions/``, ``atoms/``."""
    names = [f"structures/{n}" for n in _STRUCTURE_ARRAYS]
    names += [f"partitions/{n}" for n in _PARTITION_ARRAYS]
    try:
        atoms = store._root.get("atoms")
        if isinstance(atoms, zarr.Group):
            names += [f"atoms/{n}" for n, _ in sorted(atoms.arrays())]
    except Exception:  # noqa: BLE001 - a torn document: listed by _check_groups
        pass
    for name in names:
        try:
            node = store._root[name]
        except KeyError:
            problems.append(Problem(None, name, None, "missing (no zarr.json)"))
            continue
        except Exception as exc:  # noqa: BLE001 - a torn document: any parser's error
            problems.append(Problem(None, name, None, f"unreadable: {_why(exc)}"))
            continue
        if isinstance(node, zarr.Array):
            yield name, node


def _check_shared(
    store: OpenedStore, name: str, array: zarr.Array, parts: list[int], strict: bool
) -> tuple[int, list[Problem]]:
    """Partition ``p``'s chunk of ``array`` for each done ``p``: (chunks read, problems)."""
    meta = array.metadata
    trailing = (0,) * (array.ndim - 1)
    keys = [meta.encode_chunk_key((p, *trailing)) for p in parts]
    base, prefix = _where(store)
    decode = chunk_decoder(meta)  # type: ignore[arg-type]
    rows = array.chunks[0]
    problems = []
    n = 0
    found = _blocks(base, [f"{prefix}{name}/{k}" for k in keys])
    for p, key, data in zip(parts, keys, found, strict=True):
        if data is None:
            if strict and not _is_text(meta):
                problems.append(Problem(p, name, key, "missing"))
            continue
        n += 1
        why = _undecodable(data, decode, lambda p=p: array[p * rows : (p + 1) * rows])
        if why is not None:
            problems.append(Problem(p, name, key, why))
    return n, problems


#: Chunks of one shared array read at a time (as many as an object store is asked for at
#: once): the whole array's chunks read at once held the array's bytes (10⁶ structures of
#: 1–8 atoms: 154 MB peak RSS against 83 MB; a GB at 10⁷; docs/store-format.md).
BLOCK = CONCURRENCY


def _blocks(base: Any, keys: list[str]) -> Iterator[bytes | None]:
    """The bytes under each of ``keys`` (``None``: missing), read :data:`BLOCK` at a time."""
    for i in range(0, len(keys), BLOCK):
        yield from read_keys(base, keys[i : i + BLOCK])


def _expected_arrays(store: OpenedStore, p: int, present: list[str]) -> list[str]:
    """Arrays below ``parts/<p>/`` a done partition with elements ``present`` wrote, by the
    store's feature config (none for a store that was ingested only)."""
    features = store._meta.get("config", {}).get("features")
    if not isinstance(features, dict):
        return []
    blocks = features.get("derivatives") and store._meta.get("format_version") == 3
    out = []
    for descriptor, spec in features.items():
        if not isinstance(spec, dict):
            continue  # derivatives, dtype, a descriptor not used (None)
        covered = spec.get("elements")
        elements = [e for e in present if not isinstance(covered, list) or e in covered]
        for e in elements:
            base = f"features/{descriptor}/{e}"
            out += [f"{base}/values", f"{base}/atom_index"]
            if blocks:
                out += [f"{base}/d/{f}/{n}" for f in elements for n in _BLOCK_ARRAYS]
    return out


def _check_partition(
    store: OpenedStore, p: int, keys: list[str], present: list[str], strict: bool
) -> tuple[int, list[Problem]]:
    """Every chunk of every array of ``parts/<p>`` (``keys``: what is stored below it)."""
    group = _partition_group(p)
    base, root = _where(store)
    prefix = f"{root}{group}/"
    documents = sorted(k.removesuffix("zarr.json") for k in keys if k.endswith("zarr.json"))
    texts = read_keys(base, [f"{prefix}{d}zarr.json" for d in documents])  # d: "" or "a/b/"
    documents = [d.rstrip("/") for d in documents]
    problems = []
    arrays: dict[str, Any] = {}
    for path, text in zip(documents, texts, strict=True):
        try:
            document = json.loads(text or b"null")
            if isinstance(document, dict) and document.get("node_type") == "array":
                arrays[path] = _parsed(text)
        except Exception as exc:  # noqa: BLE001 - a torn document: any parser's error
            problems.append(Problem(p, f"{group}/{path}", None, f"unreadable: {_why(exc)}"))
    expected = _expected_arrays(store, p, present)
    groups = {
        "/".join(a.split("/")[:i]) for a in [*expected, *arrays] for i in range(a.count("/") + 1)
    }
    if keys:
        groups.add("")  # the partition's own group (its report) above anything stored
    names = {_below(group, g) for g in groups}
    problems = [replace(pr, group=pr.array in names) for pr in problems]  # torn documents
    torn = {pr.array for pr in problems}
    problems += [pr for pr in _check_groups(store, groups, p, group) if pr.array not in torn]
    unreadable_docs = {pr.array for pr in problems}
    for path in expected:
        if path not in arrays and f"{group}/{path}" not in unreadable_docs:
            problems.append(Problem(p, f"{group}/{path}", None, "missing (no zarr.json)"))
    wanted: list[tuple[str, str, Any]] = []  # (array path, chunk key, metadata)
    for path, meta in sorted(arrays.items()):
        shape, chunk_shape = meta.shape, meta.chunk_grid.chunk_shape
        grid = tuple(ceil(s / c) for s, c in zip(shape, chunk_shape, strict=True))
        wanted += [(path, meta.encode_chunk_key(c), meta) for c in np.ndindex(*grid)]
    found = read_keys(base, [f"{prefix}{path}/{key}" for path, key, _ in wanted])
    n = 0
    for (path, key, meta), data in zip(wanted, found, strict=True):
        name = f"{group}/{path}"
        decode = chunk_decoder(meta)
        if data is None:
            if strict and not _is_text(meta):
                problems.append(Problem(p, name, key, "missing"))
            continue
        n += 1

        def through_zarr(name: str = name) -> Any:
            return zarr.open_array(store=base, path=f"{root}{name}", mode="r", zarr_format=3)[...]

        why = _undecodable(data, decode, through_zarr, features=True)
        if why is not None:
            problems.append(Problem(p, name, key, why))
    return n, problems


def _undecodable(data: bytes, decode: Any, read: Any, *, features: bool = False) -> str | None:
    """What is wrong with a chunk's ``data``: ``"unreadable: why"`` where it cannot be
    decoded (``decode``, or else ``read()`` through zarr), ``"not finite: …"`` where a
    chunk of ``features`` holds a value training refuses (NaN, ±inf, beyond
    ``FEATURE_LIMIT``); ``None`` when nothing is."""
    try:
        values = decode(data) if decode is not None else read()
    except Exception as exc:  # noqa: BLE001 - codec errors come in many types
        return f"unreadable: {_why(exc)}"
    bad = out_of_range(np.asarray(values)) if features else None
    if bad is not None:
        return f"not finite: {int(bad.sum())} values not finite or beyond ±{FEATURE_LIMIT:.3g}"
    return None


def _why(exc: BaseException) -> str:
    """An exception in one line."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
