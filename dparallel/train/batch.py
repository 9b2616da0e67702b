"""The mini-batch: one type, one assembly for every data source, one walk over its tensors.

A partition in memory (:class:`PartitionData`) is a set of row tables (:class:`Rows`):
``structures``, ``atoms`` and, by source, each element's feature rows
(``features/<E>``) and pair derivatives (``derivatives/<E>/<F>``) or the neighbour list
(``pairs``). Every table numbers its rows by structure (``offsets``), so one function,
:func:`assemble`, gathers any selection of structures from any partitions and renumbers
the index columns from 0, each column gathered once straight into its place by one of
:mod:`~dparallel.train.gather_ops`' op sets — on the host (numpy, on gather threads; or
into page-locked memory for a CUDA copy) for streamed data, or on the device for data held
there. :func:`make_batch` turns the result into a :class:`Batch`.

A batch's tensors are the fields of its dataclasses (and of
:class:`~dparallel.descriptors.DescriptorResult`, :class:`~dparallel.descriptors.PairDerivatives`),
declared once: :func:`map_batch` walks them for device moves, pinning, stream recording and sizes.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch

from dparallel.descriptors import DescriptorResult, PairDerivatives
from dparallel.errors import TrainingError
from dparallel.train.gather_ops import HOST, Gather, HostOps

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


T = TypeVar("T")

#: Columns (table, column) kept in float64 whatever the training dtype: the energy labels,
#: absolute energies whose large part (1e4–5e5 eV per atom of a heavy element from an
#: all-electron code) float32 would round to eV; the model's reference energies stay
#: float64 too, so a float32 run's energy errors are float64 differences (docs/training.md).
FLOAT64_COLUMNS = frozenset({("structures", "energy")})


def column_dtype(table: str, column: str, dtype: torch.dtype | None) -> torch.dtype | None:
    """The dtype a floating column of ``table`` is cast to in a batch of ``dtype``."""
    return torch.float64 if dtype is not None and (table, column) in FLOAT64_COLUMNS else dtype


# ----------------------------------------------------------------- the batch
@dataclass
class Geometry:
    """What descriptors are computed from at prediction: positions, species and pairs.

    ``element_rows[E]`` are the (sorted) atom rows of element ``E``, found on the host so
    the device never waits for a ``nonzero``, for every model element (empty where the
    batch has none, so its network gets zero gradients as from a stored batch); ``graph``
    is the descriptor's torch graph (shared, not copied; it follows the batch's device).
    """

    positions: torch.Tensor  # (N, 3) Å
    species: torch.Tensor  # (N,) int64 index into the descriptor's elements
    pair_first: torch.Tensor  # (P,) int64 centre atom
    pair_second: torch.Tensor  # (P,) int64 neighbour atom
    pair_offsets: torch.Tensor  # (P, 3) Å, S·cell (r_ij = r_j − r_i + S·cell)
    element_rows: dict[str, torch.Tensor]  # E → (n_e,) int64
    graph: Any  # the descriptor graph, an nn.Module with columns(E)


@dataclass
class Batch:
    """A mini-batch of structures with atoms, feature rows and pairs numbered from 0.

    Exactly one of ``features`` (descriptor values and ∂G/∂r per element) and
    ``geometry`` (positions and pairs, descriptors computed when predicted) is set.
    """

    ids: np.ndarray  # (S,) source index, host
    atom_counts: torch.Tensor  # (S,) float
    structure_index: torch.Tensor  # (N,) int64
    energy: torch.Tensor  # (S,) eV, NaN if absent; float64 in every training dtype
    forces: torch.Tensor  # (N, 3) eV/Å, NaN if absent
    features: dict[str, DescriptorResult] | None = None  # element → values, atom_index, pairs
    geometry: Geometry | None = None

    @property
    def n_structures(self) -> int:
        """Number of structures S."""
        return int(self.ids.shape[0])

    @property
    def n_atoms(self) -> int:
        """Number of atoms N."""
        return int(self.structure_index.shape[0])


def map_batch(
    obj: T, fn: Callable[[torch.Tensor], torch.Tensor], module: Callable | None = None
) -> T:
    """``obj`` (a batch, or any part of one) with ``fn`` applied to every tensor of its
    dataclass fields and dicts (labels, features, geometry).

    Modules (the descriptor graph) go through ``module`` if given, else stay; anything
    else (host arrays, numbers) stays.
    """
    out: Any = obj
    if isinstance(obj, torch.Tensor):
        out = fn(obj)
    elif isinstance(obj, dict):
        out = {k: map_batch(v, fn, module) for k, v in obj.items()}
    elif isinstance(obj, torch.nn.Module):
        out = module(obj) if module is not None else obj
    elif is_dataclass(obj) and not isinstance(obj, type):
        out = replace(
            obj, **{f.name: map_batch(getattr(obj, f.name), fn, module) for f in fields(obj)}
        )
    return out


def batch_to(batch: Batch, device: torch.device, non_blocking: bool = False) -> Batch:
    """``batch`` with every tensor (and the descriptor graph) on ``device``."""
    if batch.energy.device == device:
        return batch
    return map_batch(
        batch, lambda t: t.to(device, non_blocking=non_blocking), lambda m: m.to(device)
    )


def cast_batch(batch: Batch, dtype: torch.dtype) -> Batch:
    """``batch`` with its floating tensors in ``dtype`` (where a streamed batch is cast once
    on the device, not on the host before its copy), its energies in float64."""
    cast = map_batch(batch, lambda t: t.to(dtype) if t.is_floating_point() else t)
    return replace(cast, energy=batch.energy.to(column_dtype("structures", "energy", dtype)))


def pin_batch(batch: Batch) -> Batch:
    """``batch`` in page-locked host memory, so a copy to a CUDA device can be non-blocking."""
    return map_batch(batch, lambda t: t.pin_memory())


def batch_nbytes(batch: Batch) -> int:
    """Bytes of a batch's tensors (what a step holds on the device, before activations)."""
    sizes: list[int] = []

    def count(t: torch.Tensor) -> torch.Tensor:
        sizes.append(t.numel() * t.element_size())
        return t

    map_batch(batch, count)
    return sum(sizes)


# ----------------------------------------------------------------- partitions
@dataclass
class Rows:
    """One table of a partition: rows numbered by structure, columns gathered per batch.

    ``refs`` names the columns that index rows of another table (renumbered in a batch);
    ``constant`` holds per-table values copied as they are (a feature index).
    """

    offsets: np.ndarray  # (S + 1,) host: rows of each structure
    columns: dict[str, Any]  # name → (R, ...) numpy array or tensor
    refs: dict[str, str] = field(default_factory=dict)  # column → table it indexes
    constant: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class PartitionData:
    """One partition in memory: its structures' ids and splits and its row tables."""

    p: int
    ids: np.ndarray  # (S,) source index
    split: np.ndarray  # (S,) int8
    rows: dict[str, Rows]  # tables, each after the ones it references
    nbytes: int = 0

    @property
    def n_structures(self) -> int:
        """Number of structures in the partition."""
        return int(self.ids.shape[0])


@dataclass
class Assembled:
    """The columns of a selection of structures, index columns renumbered from 0."""

    ids: np.ndarray  # (S,)
    counts: np.ndarray  # (S,) atoms per structure, host
    tables: dict[str, dict[str, Any]]  # table → column → concatenated rows
    constant: dict[str, dict[str, Any]]


def group_by_partition(items: Sequence[tuple[Any, int]]) -> list[tuple[Any, np.ndarray]]:
    """``(partition, structure)`` items as ``(partition, structures)`` groups: partitions in
    first-seen order, structures in item order (the order :func:`assemble` gathers in)."""
    groups: OrderedDict[int, tuple[Any, list[int]]] = OrderedDict()
    for part, s in items:
        key = id(part) if isinstance(part, PartitionData) else int(part)
        groups.setdefault(key, (part, []))[1].append(int(s))
    return [(part, np.asarray(sel, np.int64)) for part, sel in groups.values()]


def assemble(
    items: Sequence[tuple[PartitionData, int]],
    ops: HostOps = HOST,
    dtype: torch.dtype | None = None,
) -> Assembled:
    """Gather ``(partition, local structure)`` items into one set of renumbered columns
    (floating ones in ``dtype``; ``None``: as stored).

    Structures are grouped by partition (first-seen order), then in item order.
    """
    return assemble_groups(group_by_partition(items), ops, dtype)


def assemble_groups(
    groups: Sequence[tuple[PartitionData, np.ndarray]],
    ops: HostOps = HOST,
    dtype: torch.dtype | None = None,
) -> Assembled:
    """Gather structures ``sel`` of each ``(partition, sel)`` group, in that order, into one
    set of columns, index columns renumbered from 0, floating columns in ``dtype``.

    Each column is allocated once and every group's rows are gathered straight into their
    place in it (``ops.gathers``, run together by ``ops.run``): one copy of the data, no
    concatenation.
    """
    placed: list[dict[str, tuple[Any, int]]] = []  # per group: table → (local rows, first)
    totals: dict[str, int] = {}
    first_seen: dict[str, Rows] = {}
    stored: dict[str, dict[str, list[Any]]] = {}  # table → column → each group's values
    ids, counts = [], []
    for part, sel in groups:
        ids.append(part.ids[sel])
        atoms = part.rows["atoms"].offsets
        counts.append(atoms[sel + 1] - atoms[sel])
        where = {}
        for name, table in part.rows.items():
            rows = ops.ranges(table.offsets[sel], table.offsets[sel + 1])  # (R_b,) local
            where[name] = (rows, totals.get(name, 0))
            totals[name] = where[name][1] + int(rows.shape[0])
            first_seen.setdefault(name, table)
            for col, values in table.columns.items():
                stored.setdefault(name, {}).setdefault(col, []).append(values)
        placed.append(where)
    tables = {
        name: {
            col: ops.empty(
                totals[name], v, column_dtype(name, col, dtype) if _floating(v) else None
            )
            for col, v in ((c, _widest(stored[name][c])) for c in first_seen[name].columns)
        }
        for name in totals
    }
    tasks: list[Gather] = []
    for (part, _), where in zip(groups, placed, strict=True):
        numbering = {  # local row → batch row of each table another one references
            ref: ops.renumber(int(part.rows[ref].offsets[-1]), *where[ref])
            for ref in {t for r in part.rows.values() for t in r.refs.values()}
            if ref in part.rows
        }
        for name, table in part.rows.items():
            rows, start = where[name]
            for col, values in table.columns.items():
                out = tables[name][col][start : start + int(rows.shape[0])]
                tasks += ops.gathers(values, rows, out, numbering.get(table.refs.get(col, "")))
    ops.run(tasks)
    constant = {name: table.constant for name, table in first_seen.items()}
    return Assembled(np.concatenate(ids), np.concatenate(counts), tables, constant)


def _widest(columns: list[Any]) -> Any:
    """Of one column's values in several partitions, one whose dtype holds all the others'
    (as a concatenation would promote them: int32 and uint32 make int64): a stored one where
    one has it, else an empty one of that dtype."""
    promote = torch.promote_types if isinstance(columns[0], torch.Tensor) else np.promote_types
    wide = functools.reduce(promote, [c.dtype for c in columns])
    found = next((c for c in columns if c.dtype == wide), None)
    if found is not None:
        return found
    first = columns[0][:0]
    return first.to(wide) if isinstance(first, torch.Tensor) else first.astype(wide)


def _floating(values: Any) -> bool:
    """Whether a column (numpy array or tensor) holds floating-point numbers."""
    if isinstance(values, torch.Tensor):
        return values.is_floating_point()
    return bool(np.issubdtype(values.dtype, np.floating))


def split_assembled(
    got: Assembled, part: PartitionData, sel: np.ndarray, sizes: Sequence[int], ops: HostOps
) -> list[Assembled]:
    """``got`` (structures ``sel`` of ``part``, gathered in order) cut into consecutive
    batches of ``sizes`` structures, each with its index columns renumbered from 0.

    The columns of each batch are views of ``got``'s: a batch of many assembled at once
    costs one gather per column for all of them.
    """
    if len(sizes) == 1:
        return [got]
    edges = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    row_edges = {}  # table → (B + 1,) first row of each batch
    for name in got.tables:
        offsets = part.rows[name].offsets
        per_structure = offsets[sel + 1] - offsets[sel]
        row_edges[name] = np.concatenate([[0], np.cumsum(per_structure)])[edges]
    tables: dict[str, dict[str, Any]] = {}
    for name, cols in got.tables.items():
        renumbered = dict(cols)
        rows_per_batch = np.diff(row_edges[name])
        for col, ref in part.rows[name].refs.items():  # batch b's rows of ref start at 0
            renumbered[col] = cols[col] - ops.repeat(row_edges[ref][:-1], rows_per_batch)
        tables[name] = renumbered
    return [
        Assembled(
            got.ids[edges[b] : edges[b + 1]],
            got.counts[edges[b] : edges[b + 1]],
            {
                name: {c: v[row_edges[name][b] : row_edges[name][b + 1]] for c, v in cols.items()}
                for name, cols in tables.items()
            },
            got.constant,
        )
        for b in range(len(sizes))
    ]


def take_structures(part: PartitionData, sel: np.ndarray, ops: HostOps = HOST) -> PartitionData:
    """Structures ``sel`` of ``part`` as a partition of their own (rows copied, in the stored
    dtypes, index columns renumbered): what is left of a partition, without the rest."""
    got = assemble_groups([(part, sel)], ops)
    rows = {}
    for name, table in part.rows.items():
        per_structure = table.offsets[sel + 1] - table.offsets[sel]
        offsets = np.concatenate([[0], np.cumsum(per_structure)]).astype(np.int64)
        rows[name] = Rows(offsets, got.tables[name], dict(table.refs), table.constant)
    nbytes = sum(int(v.nbytes) for cols in got.tables.values() for v in cols.values())
    return PartitionData(part.p, part.ids[sel], part.split[sel], rows, nbytes)


def merge_partitions(parts: Sequence[PartitionData], ops: HostOps = HOST) -> PartitionData:
    """``parts`` as one partition (their structures in order), index columns renumbered.

    Each column is concatenated once and the pieces are released as it goes (``parts`` are
    emptied), so merging data held on a device needs one column's size more, not twice the
    data. A table a partition lacks (no atoms of an element) has no rows there.

    Raises
    ------
    TrainingError
        Two partitions disagree on a table's constants (a derivative table's feature
        columns), so their rows cannot share one table.
    """
    # each partition's tables come after those they reference, so their union in
    # first-seen order does too
    names = list(dict.fromkeys(name for p in parts for name in p.rows))
    structures = [p.n_structures for p in parts]
    row_base: dict[str, np.ndarray] = {}  # table → (n_parts,) first row of each partition
    merged: dict[str, Rows] = {}
    for name in names:
        present = [p.rows.get(name) for p in parts]
        n_rows = [int(t.offsets[-1]) if t is not None else 0 for t in present]
        row_base[name] = np.concatenate([[0], np.cumsum(n_rows)[:-1]]).astype(np.int64)
        first = next(t for t in present if t is not None)
        offsets = [
            (t.offsets[:-1] if t is not None else np.zeros(s, np.int64)) + b
            for t, s, b in zip(present, structures, row_base[name], strict=True)
        ]
        offsets.append(np.array([sum(n_rows)], np.int64))
        _check_constants(name, first, parts, present)
        columns = {}
        for col in list(first.columns):
            pieces = []
            for i, t in enumerate(present):
                if t is None:
                    continue
                values = t.columns.pop(col)
                if col in first.refs:
                    values = values + int(row_base[first.refs[col]][i])
                pieces.append(values)
            columns[col] = ops.cat(pieces)
            del pieces
        merged[name] = Rows(
            np.concatenate(offsets).astype(np.int64), columns, dict(first.refs), first.constant
        )
    return PartitionData(
        -1,
        np.concatenate([p.ids for p in parts]),
        np.concatenate([p.split for p in parts]),
        merged,
        sum(p.nbytes for p in parts),
    )


def _check_constants(
    name: str, first: Rows, parts: Sequence[PartitionData], present: Sequence[Rows | None]
) -> None:
    """Raise unless every partition having table ``name`` has ``first``'s constants."""
    for part, t in zip(parts, present, strict=True):
        if t is None:
            continue
        for key, value in t.constant.items():
            if not np.array_equal(_host(value), _host(first.constant[key])):
                raise TrainingError(
                    f"partition {part.p}: table {name} has another {key} than the partitions "
                    "before it; the store's partitions were featurized differently"
                )


def _host(a: Any) -> np.ndarray:
    return a.cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def make_batch(
    got: Assembled, elements: Sequence[str], dtype: torch.dtype | None, ops: HostOps = HOST
) -> Batch:
    """The :class:`Batch` of assembled columns: labels and, if read, descriptor features.

    Floating columns (labels, values, vectors, ∂G/∂r) are cast to ``dtype`` (``None``:
    kept as stored, to be cast later with :func:`cast_batch`; atom counts in float64),
    energies to float64 (:data:`FLOAT64_COLUMNS`).
    """
    tables = got.tables

    def t(table: str, col: str, floating: bool = False) -> torch.Tensor:
        out = ops.tensor(tables[table][col])
        return out.to(column_dtype(table, col, dtype)) if floating and dtype is not None else out

    features: dict[str, DescriptorResult] | None = None
    if any(name.startswith("features/") for name in tables):
        features = {}
        for elem in elements:
            if f"features/{elem}" not in tables:
                continue
            pairs = {}
            for neigh in elements:
                name = f"derivatives/{elem}/{neigh}"
                if name in tables:
                    index = ops.tensor(torch.as_tensor(got.constant[name]["feature_index"]))
                    pairs[neigh] = PairDerivatives(
                        pair_first=t(name, "first"), pair_second=t(name, "second"),
                        center=t(name, "center"), vectors=t(name, "vectors", True),
                        feature_index=index, dG_dr=t(name, "dG_dr", True),
                    )  # fmt: skip
            features[elem] = DescriptorResult(
                values=t(f"features/{elem}", "values", True),
                atom_index=t(f"features/{elem}", "atom_index"),
                pairs=pairs or None,
            )
    counts = ops.tensor(got.counts)
    n_s = int(got.counts.shape[0])
    return Batch(
        ids=got.ids,
        atom_counts=counts.to(dtype or torch.float64),
        structure_index=torch.repeat_interleave(
            torch.arange(n_s, device=counts.device), counts, output_size=int(got.counts.sum())
        ),
        energy=t("structures", "energy", True),
        forces=t("atoms", "forces", True),
        features=features,
    )
