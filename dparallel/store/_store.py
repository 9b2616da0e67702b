"""The dparallel zarr store: slot layout, create/open, partition writes, reads.

See docs/store-format.md for the layout. Every array is created at final shape by the
client (:func:`create_store`); partition ``p`` owns whole chunks only (atom rows
``[p·A, (p+1)·A)``, structure rows ``[p·K, (p+1)·K)``, index ``p`` of the per-partition
arrays, and the group ``parts/<p>``), so processes write concurrently without locks.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import zarr
from zarr.codecs import BloscCodec

from dparallel.errors import StoreError, StoreIncompleteError, StoreMismatchError
from dparallel.types import StructureBatch

if TYPE_CHECKING:  # pragma: no cover - the store must not import workflow at run time
    from dparallel.workflow.plan import Plan

__all__ = ["Store", "create_store", "open_store", "FORMAT_VERSION", "SOURCE_IDENTITY_KEYS"]

log = logging.getLogger(__name__)

#: Version of the on-disk layout; bumped on incompatible changes.
FORMAT_VERSION = 1
#: Fingerprint fields that identify a source's content (path and mtime may change).
SOURCE_IDENTITY_KEYS = (
    "format",
    "size",
    "n_structures",
    "n_atoms",
    "index_sha256",
    "sample_sha256",
)
_N_Z = 119  # atomic numbers 0..118
#: Compressor of every numeric array: LZ4 behind a byte shuffle. On float64 per-pair
#: derivatives it writes about twice as fast as zarr's default zstd and compresses a
#: little better (benchmarks/bench_store_codecs.py); zarr runs it single-threaded.
_NUMERIC_COMPRESSORS = (BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),)


def _compressors(dtype: Any) -> Any:
    """Compressors for an array of ``dtype``: LZ4/shuffle for numbers, zarr's default else."""
    return "auto" if dtype is str or np.dtype(dtype).kind in "OUS" else _NUMERIC_COMPRESSORS


# name → (axis "atom"|"structure", trailing shape, dtype, fill value)
_STRUCTURE_ARRAYS: dict[str, tuple[str, tuple[int, ...], Any, Any]] = {
    "numbers": ("atom", (), np.uint8, 0),
    "positions": ("atom", (3,), np.float64, 0.0),
    "forces": ("atom", (3,), np.float64, np.nan),
    "cells": ("structure", (3, 3), np.float64, 0.0),
    "pbc": ("structure", (3,), np.bool_, False),
    "energy": ("structure", (), np.float64, np.nan),
    "n_atoms": ("structure", (), np.int64, 0),
    "source_index": ("structure", (), np.int64, -1),
    "tags": ("structure", (), str, ""),
}


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


def _jsonable(config: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return json.loads(json.dumps(dict(config), sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"config must be JSON-serialisable: {exc}") from exc


_IDENTITY_ATTRS = {"format_version", "versions", "created", "source", "config", "plan", "slots"}


class Store:
    """A dparallel zarr store opened for reading (``mode="r"``) or writing (``"r+"``).

    Picklable (path + mode), so a task can receive it and write its own partition.
    """

    def __init__(self, path: str | os.PathLike[str], mode: Literal["r", "r+"] = "r") -> None:
        self.path = Path(path).expanduser().resolve()
        self.mode = mode
        if not (self.path / "zarr.json").is_file():
            raise StoreError(f"no zarr store at {self.path}")
        self._root = zarr.open_group(str(self.path), mode=mode)
        meta = self._root.attrs.get("dparallel")
        if not isinstance(meta, dict):
            raise StoreError(f"{self.path} is a zarr group but not a dparallel store")
        if meta.get("format_version") != FORMAT_VERSION:
            raise StoreError(
                f"{self.path} has store format {meta.get('format_version')}, "
                f"this dparallel reads format {FORMAT_VERSION}"
            )
        self._meta = meta
        self._starts = np.asarray(meta["plan"]["starts"], np.int64)  # (P,)
        self._stops = np.asarray(meta["plan"]["stops"], np.int64)  # (P,)
        self._cum: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), "mode": self.mode}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["mode"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}, mode={self.mode!r}, partitions={self.n_partitions})"

    # ------------------------------------------------------------ metadata
    @property
    def attrs(self) -> dict[str, Any]:
        """The ``dparallel`` root attributes (versions, source, config, plan, slots)."""
        return dict(self._meta)

    def update_attrs(self, values: Mapping[str, Any]) -> None:
        """Add client-written summaries (e.g. ``statistics``) to the root attributes.

        Only the client writes these (one writer); identity keys cannot be changed.
        """
        if self.mode == "r":
            raise StoreError(f"{self.path} is open read-only")
        clash = sorted(_IDENTITY_ATTRS & set(values))
        if clash:
            raise StoreError(f"attributes {clash} define the store and cannot be updated")
        meta = {**self._meta, **_jsonable(values)}
        self._root.attrs["dparallel"] = meta
        self._meta = meta

    @property
    def plan(self) -> Plan:
        """The partition plan the store was created with."""
        from dparallel.workflow.plan import Plan  # pure module; imported lazily (layering)

        return Plan.from_dict(self._meta["plan"])

    @property
    def n_partitions(self) -> int:
        """Number of partitions ``P``."""
        return int(self._starts.shape[0])

    def partition_range(self, p: int) -> tuple[int, int]:
        """Source structures ``[start, stop)`` owned by partition ``p``."""
        return int(self._starts[p]), int(self._stops[p])

    def partition_of(self, index: int) -> int:
        """The partition owning source structure ``index``."""
        return int(np.searchsorted(self._stops, int(index), side="right"))

    @property
    def atom_slots(self) -> int:
        """Atom rows per partition ``A``."""
        return int(self._meta["slots"]["atoms"])

    @property
    def structure_slots(self) -> int:
        """Structure rows per partition ``K``."""
        return int(self._meta["slots"]["structures"])

    def _array(self, name: str) -> zarr.Array:
        return self._root[name]  # type: ignore[return-value]

    # ---------------------------------------------------------- completion
    def done_partitions(self) -> np.ndarray:
        """Indices (int64, sorted) of the partitions marked done."""
        return np.flatnonzero(self._array("partitions/done")[:]).astype(np.int64)

    def pending_partitions(self) -> np.ndarray:
        """Indices (int64, sorted) of the partitions not yet done."""
        return np.flatnonzero(self._array("partitions/done")[:] == 0).astype(np.int64)

    @property
    def is_complete(self) -> bool:
        """True when every partition is done."""
        return len(self.done_partitions()) == self.n_partitions

    # --------------------------------------------------------------- writes
    def _check_p(self, p: int) -> int:
        p = int(p)
        if not 0 <= p < self.n_partitions:
            raise StoreError(f"partition {p} outside [0, {self.n_partitions})")
        if self.mode == "r":
            raise StoreError(f"{self.path} is open read-only")
        return p

    def write_structures(
        self, p: int, batch: StructureBatch, source_index: np.ndarray | None = None
    ) -> None:
        """Write partition ``p``'s (valid) structures into its slots, padding the rest.

        ``source_index`` (S,) gives each structure's index in the source file (default:
        the partition's range, i.e. nothing skipped). Rewrites the whole chunk, so a
        retried task overwrites what a failed attempt left.
        """
        p = self._check_p(p)
        A, K = self.atom_slots, self.structure_slots
        S, N = batch.n_structures, batch.n_atoms
        if source_index is None:
            source_index = np.arange(self._starts[p], self._starts[p] + S)
        source_index = np.asarray(source_index, np.int64).reshape(-1)  # (S,)
        lo, hi = self.partition_range(p)
        if S > K or N > A or source_index.shape[0] != S:
            raise StoreError(
                f"partition {p} holds at most {K} structures / {A} atoms, "
                f"got {S} structures / {N} atoms ({source_index.shape[0]} source indices)"
            )
        if S and (source_index.min() < lo or source_index.max() >= hi):
            raise StoreError(f"partition {p} owns source structures [{lo}, {hi}) only")
        values = {
            "numbers": batch.numbers.astype(np.uint8),
            "positions": batch.positions,
            "forces": batch.forces,
            "cells": batch.cells,
            "pbc": batch.pbc,
            "energy": batch.energy,
            "n_atoms": batch.atom_counts,
            "source_index": source_index,
            "tags": np.asarray([str(t) for t in batch.tags], dtype=str),
        }
        for name, (axis, trailing, dtype, fill) in _STRUCTURE_ARRAYS.items():
            cap = A if axis == "atom" else K
            if dtype is str:
                full = np.full(cap, "", dtype=object)
            else:
                full = np.full((cap, *trailing), fill, dtype=dtype)
            full[: values[name].shape[0]] = values[name]
            self._array(f"structures/{name}")[p * cap : (p + 1) * cap] = full
        present = np.zeros(_N_Z, bool)
        present[np.unique(batch.numbers)] = True
        self._array("partitions/elements")[p] = present
        self._array("partitions/n_structures")[p] = S
        self._array("partitions/n_atoms")[p] = N

    def _part_group(self, p: int, create: bool) -> zarr.Group | None:
        key = f"parts/{p}"
        if key in self._root:
            return self._root[key]  # type: ignore[return-value]
        if not create:
            return None
        return zarr.open_group(str(self.path / "parts" / str(p)), mode="a")

    def record_skipped(self, records: Sequence[tuple[int, str]]) -> None:
        """Record skipped source structures ``(index, reason)`` in their partitions' groups.

        Each record goes to the partition owning that source index; call it only for the
        partitions this process writes (concurrency rule: one writer per partition).
        """
        by_part: dict[int, list[tuple[int, str]]] = {}
        for index, reason in records:
            by_part.setdefault(self.partition_of(int(index)), []).append((int(index), str(reason)))
        for p, recs in by_part.items():
            g = self._part_group(self._check_p(p), create=True)
            assert g is not None
            old = {int(i): r for i, r in g.attrs.get("skipped", [])}
            old.update(dict(recs))
            g.attrs["skipped"] = [[i, old[i]] for i in sorted(old)]

    def skipped(self) -> list[tuple[int, str]]:
        """Every recorded ``(source index, reason)``, sorted by index."""
        out: list[tuple[int, str]] = []
        if "parts" not in self._root:
            return out
        for _, g in self._root["parts"].groups():  # type: ignore[union-attr]
            out += [(int(i), str(r)) for i, r in g.attrs.get("skipped", [])]
        return sorted(out)

    def mark_done(self, p: int, report: Mapping[str, Any] | None = None) -> None:
        """Mark partition ``p`` done (last write of a task); ``report`` kept in ``parts/<p>``."""
        p = self._check_p(p)
        if report is not None:
            g = self._part_group(p, create=True)
            assert g is not None
            g.attrs["report"] = _jsonable(report)
        self._array("partitions/done")[p] = 1
        self._cum = None

    def clear_done(self, p: int) -> None:
        """Mark partition ``p`` not done (before re-running it)."""
        self._array("partitions/done")[self._check_p(p)] = 0
        self._cum = None

    def report(self, p: int) -> dict[str, Any] | None:
        """The report stored by :meth:`mark_done`, if any."""
        g = self._part_group(int(p), create=False)
        return None if g is None else g.attrs.get("report")

    def write_partition_arrays(
        self, p: int, arrays: Mapping[str, np.ndarray], group: str | None = None
    ) -> None:
        """Write arrays whose size only the task knows into ``parts/<p>[/group]/<name>``.

        Each array is one chunk, (re)created by the owning task only.
        """
        p = self._check_p(p)
        g = self._part_group(p, create=True)
        assert g is not None
        if group:
            g = g.require_group(group)
        for name, values in arrays.items():
            values = np.asarray(values)
            g.create_array(
                name,
                shape=values.shape,
                dtype=values.dtype,
                chunks=tuple(max(1, s) for s in values.shape) or None,
                compressors=_compressors(values.dtype),
                overwrite=True,
            )[...] = values

    def read_partition_arrays(self, p: int, group: str | None = None) -> dict[str, np.ndarray]:
        """Arrays written by :meth:`write_partition_arrays` for partition ``p``."""
        g = self._part_group(int(p), create=False)
        if g is not None and group:
            g = g.get(group, None)  # type: ignore[assignment]
        if g is None:
            return {}
        return {name: a[...] for name, a in g.arrays()}

    # ---------------------------------------------------- per-atom arrays
    def create_atom_array(
        self,
        name: str,
        trailing_shape: Sequence[int] = (),
        dtype: Any = np.float64,
        fill_value: Any = 0,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        """Create ``atoms/<name>`` of shape (P·A, *trailing_shape), one chunk per partition.

        Client-side, before tasks write; does nothing if it exists with the same spec.
        """
        trailing = tuple(int(t) for t in trailing_shape)
        shape = (self.n_partitions * self.atom_slots, *trailing)
        key = f"atoms/{name}"
        if key in self._root:
            arr = self._array(key)
            if arr.shape != shape or np.dtype(arr.dtype) != np.dtype(dtype):
                raise StoreMismatchError(
                    f"{key} exists with shape {arr.shape} {arr.dtype}, asked {shape} {dtype}"
                )
            return
        self._root.create_array(
            key,
            shape=shape,
            chunks=(self.atom_slots, *trailing),
            dtype=dtype,
            fill_value=fill_value,
            compressors=_compressors(dtype),
            attributes=dict(attributes or {}),
        )

    def write_atom_array(self, name: str, p: int, values: np.ndarray) -> None:
        """Write partition ``p``'s rows (n_atoms of p, *trailing) of ``atoms/<name>``."""
        p = self._check_p(p)
        arr = self._array(f"atoms/{name}")
        A = self.atom_slots
        values = np.asarray(values, dtype=arr.dtype)
        if values.shape[0] > A or values.shape[1:] != arr.shape[1:]:
            raise StoreError(
                f"atoms/{name}: partition {p} takes up to ({A}, *{arr.shape[1:]}), "
                f"got {values.shape}"
            )
        full = np.full((A, *arr.shape[1:]), arr.fill_value, dtype=arr.dtype)
        full[: values.shape[0]] = values
        arr[p * A : (p + 1) * A] = full

    def read_atom_array(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows of ``atoms/<name>`` for the atoms of stored structures ``[start, stop)``."""
        arr = self._array(f"atoms/{name}")
        parts = [arr[a:b] for a, b in self._atom_row_ranges(start, stop)]
        if not parts:
            return np.zeros((0, *arr.shape[1:]), dtype=arr.dtype)
        return np.concatenate(parts)

    # ---------------------------------------------------------------- reads
    def _cumulative(self) -> np.ndarray:
        """(P + 1,) first stored-structure index of each partition (done ones only count)."""
        if self._cum is None:
            n = self._array("partitions/n_structures")[:]
            done = self._array("partitions/done")[:].astype(bool)
            self._cum = np.concatenate([[0], np.cumsum(np.where(done, n, 0))]).astype(np.int64)
        return self._cum

    @property
    def n_structures(self) -> int:
        """Structures stored by done partitions (all valid structures once complete)."""
        return int(self._cumulative()[-1])

    def __len__(self) -> int:
        return self.n_structures

    @property
    def n_atoms(self) -> int:
        """Atoms stored by done partitions."""
        done = self._array("partitions/done")[:].astype(bool)
        return int(self._array("partitions/n_atoms")[:][done].sum())

    @property
    def elements(self) -> list[int]:
        """Sorted atomic numbers present in done partitions."""
        done = self._array("partitions/done")[:].astype(bool)
        present = self._array("partitions/elements")[:][done].any(axis=0)
        return [int(z) for z in np.flatnonzero(present)]

    def _spans(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """``(partition, local start, local stop)`` covering stored structures [start, stop)."""
        if not self.is_complete:
            raise StoreIncompleteError(
                f"{self.path}: {len(self.pending_partitions())} of {self.n_partitions} "
                "partitions are not done; finish the run (e.g. re-run `dparallel ingest`) "
                "or read done partitions with read_partition(p)"
            )
        cum = self._cumulative()
        n = int(cum[-1])
        if not 0 <= start <= stop <= n:
            raise IndexError(f"structure range [{start}, {stop}) outside [0, {n})")
        out = []
        p = int(np.searchsorted(cum, start, side="right")) - 1
        while start < stop:
            take = min(stop, int(cum[p + 1]))
            if take > start:
                out.append((p, start - int(cum[p]), take - int(cum[p])))
            start = max(start, take)
            p += 1
        return out

    def _local_offsets(self, p: int, upto: int) -> np.ndarray:
        K = self.structure_slots
        counts = self._array("structures/n_atoms")[p * K : p * K + upto]
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def _atom_row_ranges(self, start: int, stop: int) -> list[tuple[int, int]]:
        out = []
        for p, a, b in self._spans(start, stop):
            off = self._local_offsets(p, b)
            out.append((p * self.atom_slots + int(off[a]), p * self.atom_slots + int(off[b])))
        return out

    def _read_local(self, p: int, a: int, b: int) -> tuple[StructureBatch, np.ndarray]:
        A, K = self.atom_slots, self.structure_slots
        off = self._local_offsets(p, b)
        ra, rb = p * A + int(off[a]), p * A + int(off[b])
        sa, sb = p * K + a, p * K + b

        def get(name: str, lo: int, hi: int) -> np.ndarray:
            return self._array(f"structures/{name}")[lo:hi]

        batch = StructureBatch(
            numbers=get("numbers", ra, rb).astype(np.int64),
            positions=get("positions", ra, rb),
            cells=get("cells", sa, sb),
            pbc=get("pbc", sa, sb),
            energy=get("energy", sa, sb),
            forces=get("forces", ra, rb),
            offsets=off[a : b + 1] - off[a],
            tags=np.asarray(get("tags", sa, sb), dtype=object),
        )
        return batch, get("source_index", sa, sb)

    def read_structures(self, start: int = 0, stop: int | None = None) -> StructureBatch:
        """Stored structures ``[start, stop)`` as one batch; reads only their chunks."""
        stop = self.n_structures if stop is None else stop
        return StructureBatch.concatenate(
            [self._read_local(p, a, b)[0] for p, a, b in self._spans(start, stop)]
        )

    def source_indices(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """(stop − start,) int64 index in the source file of each stored structure."""
        stop = self.n_structures if stop is None else stop
        K = self.structure_slots
        arr = self._array("structures/source_index")
        parts = [arr[p * K + a : p * K + b] for p, a, b in self._spans(start, stop)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def read_partition(self, p: int) -> StructureBatch:
        """The structures partition ``p`` stored (it must be done)."""
        p = int(p)
        if not self._array("partitions/done")[p]:
            raise StoreIncompleteError(f"{self.path}: partition {p} is not done")
        n = int(self._array("partitions/n_structures")[p])
        return self._read_local(p, 0, n)[0]

    def arrays(self) -> dict[str, dict[str, Any]]:
        """Every array: ``{path: {shape, dtype, chunks}}``."""
        out: dict[str, dict[str, Any]] = {}

        def walk(group: zarr.Group, prefix: str) -> None:
            for name, node in group.members():
                key = f"{prefix}{name}"
                if key.startswith("parts/"):
                    continue
                if isinstance(node, zarr.Group):
                    walk(node, key + "/")
                else:
                    out[key] = {
                        "shape": list(node.shape),
                        "dtype": str(node.dtype),
                        "chunks": list(node.chunks),
                    }

        walk(self._root, "")
        return dict(sorted(out.items()))

    def info(self) -> dict[str, Any]:
        """Summary: counts, elements, completeness, skipped, arrays, source, config."""
        from ase.data import chemical_symbols

        done = self.done_partitions()
        skipped = self.skipped()
        return {
            "path": str(self.path),
            "format_version": self._meta["format_version"],
            "n_structures": self.n_structures,
            "n_atoms": self.n_atoms,
            "elements": [chemical_symbols[z] for z in self.elements],
            "complete": len(done) == self.n_partitions,
            "partitions_done": int(len(done)),
            "partitions_total": self.n_partitions,
            "slots": dict(self._meta["slots"]),
            "skipped": [{"index": i, "reason": r} for i, r in skipped],
            "n_skipped": len(skipped),
            "source": self._meta["source"],
            "config": self._meta["config"],
            "versions": self._meta["versions"],
            "arrays": self.arrays(),
        }


def _identity(fp: Mapping[str, Any]) -> dict[str, Any]:
    return {k: fp.get(k) for k in SOURCE_IDENTITY_KEYS}


def create_store(
    path: str | os.PathLike[str],
    *,
    source_fingerprint: Mapping[str, Any],
    atom_counts: np.ndarray,
    plan: Plan,
    config: Mapping[str, Any],
    overwrite: bool = False,
) -> Store:
    """Create a store with every structure array at final shape, or reopen a matching one.

    Parameters
    ----------
    path
        Directory of the zarr store.
    source_fingerprint
        ``StructureSource.fingerprint()``; its identity fields must match on reopen.
    atom_counts
        (S,) atoms per source structure; must agree with ``plan``.
    plan
        Partitions (``dparallel.workflow.plan_partitions``).
    config
        Validated, JSON-serialisable config; must match on reopen.
    overwrite
        Replace an existing store made from another source or config.

    Returns
    -------
    Store
        Open for writing (``mode="r+"``). An existing store made from the same source,
        config and plan is returned as it is, so done partitions are kept (resume).

    Raises
    ------
    StoreMismatchError
        The path holds another store (or something else) and ``overwrite`` is False.
    """
    path = Path(path).expanduser().resolve()
    counts = np.asarray(atom_counts, np.int64).reshape(-1)
    if plan.n_structures != counts.shape[0] or int(plan.atoms.sum()) != int(counts.sum()):
        raise StoreError(
            f"plan covers {plan.n_structures} structures / {int(plan.atoms.sum())} atoms, "
            f"atom_counts has {counts.shape[0]} / {int(counts.sum())}"
        )
    config = _jsonable(config)
    fingerprint = _jsonable(source_fingerprint)
    if path.exists():
        if not overwrite:
            try:
                existing = Store(path, mode="r+")
            except StoreError as exc:
                raise StoreMismatchError(
                    f"{path} exists and is not a dparallel store of this version ({exc}); "
                    "remove it or pass overwrite=True (--overwrite)"
                ) from None
            meta = existing.attrs
            diffs = []
            if _identity(meta["source"]) != _identity(fingerprint):
                diffs.append(
                    f"source {meta['source'].get('path')} ≠ {fingerprint.get('path')} "
                    "(content differs)"
                )
            if meta["config"] != config:
                diffs.append(f"config {meta['config']} ≠ {config}")
            if meta["plan"] != _jsonable(plan.to_dict()):
                diffs.append("partition plan differs")
            if diffs:
                raise StoreMismatchError(
                    f"{path} was made from another source or config: "
                    + "; ".join(diffs)
                    + ". Pass overwrite=True (--overwrite) to replace it."
                )
            return existing
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    A, K = plan.slots
    P = plan.n_partitions
    # Build beside the target and rename: an interrupted creation never leaves a
    # half-made store at ``path`` that a resumed run would refuse.
    building = path.with_name(f"{path.name}.creating-{os.getpid()}")
    if building.exists():
        shutil.rmtree(building)
    root = zarr.open_group(str(building), mode="w")
    for name, (axis, trailing, dtype, fill) in _STRUCTURE_ARRAYS.items():
        cap = A if axis == "atom" else K
        root.create_array(
            f"structures/{name}",
            shape=(P * cap, *trailing),
            chunks=(cap, *trailing),
            dtype=dtype,
            fill_value=fill,
            compressors=_compressors(dtype),
        )
    for name, trailing, dtype in (
        ("n_structures", (), np.int64),
        ("n_atoms", (), np.int64),
        ("elements", (_N_Z,), np.bool_),
        ("done", (), np.uint8),
    ):
        root.create_array(
            f"partitions/{name}",
            shape=(P, *trailing),
            chunks=(1, *trailing),
            dtype=dtype,
            fill_value=0,
            compressors=_compressors(dtype),
        )
    root.create_group("parts")
    root.create_group("atoms")
    root.attrs["dparallel"] = {
        "format_version": FORMAT_VERSION,
        "versions": _versions(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "source": fingerprint,
        "config": config,
        "plan": plan.to_dict(),
        "slots": {"atoms": A, "structures": K},
    }
    os.replace(building, path)
    log.info("created store %s: %d partitions, slots %s", path, P, plan.slots)
    return Store(path, mode="r+")


def open_store(path: str | os.PathLike[str], mode: Literal["r", "r+"] = "r") -> Store:
    """Open an existing dparallel store (``mode="r"`` read-only, ``"r+"`` to write)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise StoreError(f"store not found: {p}")
    return Store(p, mode=mode)
