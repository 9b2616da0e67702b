"""Pure partition planning: contiguous structure ranges balanced by atom count or by an
estimate of their work. No I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from dparallel.errors import ConfigError

__all__ = [
    "MAX_PARTITION_ATOMS",
    "MIN_PARTITION_ATOMS",
    "MIN_SPLIT_ATOMS",
    "TASKS_PER_WORKER",
    "TASK_BYTES",
    "WORKER_BYTES",
    "Plan",
    "Slots",
    "compiled_pair_bytes",
    "derived_partition_atoms",
    "estimated_work",
    "given_partition_atoms",
    "limit_for",
    "memory_atoms",
    "neighbours_per_atom",
    "plan_partitions",
    "task_budget",
    "task_bytes_per_atom",
    "torch_pair_bytes",
]

#: Bounds of a derived partition size (atoms): below the minimum, per-task costs (opening
#: the store, reading, writing structures, statistics and metadata) outweigh the kernels
#: (docs/store-format.md, "Partition sizes"); above the maximum, a task's memory grows too
#: large. What an atom holds while computing depends on the descriptors
#: (:func:`task_bytes_per_atom`: 42 kB estimated for n2p2's water example with dG/dr, 33 kB
#: measured; 87 kB for a 4-element set of 192 functions with 82 neighbours, ~75 measured),
#: so a derived size is also bounded by ``TASK_BYTES`` of them (:func:`memory_atoms`).
#: Data too small for ``MIN_PARTITION_ATOMS`` per worker gets one partition per worker
#: instead, but none smaller than ``MIN_SPLIT_ATOMS`` (below that one task is faster than
#: several).
#: ``MAX_PARTITION_ATOMS`` is also the size when none is given and none is derived
#: (ingest, and featurize without a worker count): :func:`given_partition_atoms`.
MIN_PARTITION_ATOMS = 5_000
MIN_SPLIT_ATOMS = 1_000
MAX_PARTITION_ATOMS = 20_000
#: A task's estimated arrays (:func:`task_bytes_per_atom` × atoms) a derived partition size
#: keeps within: 1.5 GB (peaks measured ~0.2–0.3 GB above it: the worker's own modules).
TASK_BYTES = 1_500_000_000
#: A featurize worker's memory before its task's arrays (its modules: numba, torch, zarr),
#: as measured on the 2-core machine (0.2–0.3 GB).
WORKER_BYTES = 300_000_000
#: Bytes a pair of the neighbour list holds (int64 rows i, j and shift, float64 vector and
#: distance: ``dparallel.neighbors.Neighbors``).
NEIGHBOR_BYTES = 72
#: Bytes a pair takes beside the list while the compiled kernels compute (a centre element's
#: selection of its pairs: rows, centre, neighbour element, vector, distance, 56; or, while
#: the list is made, vesin's own buffers, 60; and the kernel's 16), with ~20 bytes of margin.
PAIR_WORK_BYTES = 96
#: With dG/dr, bytes each pair of a neighbour element's derivative arrays holds beside
#: its ∂G/∂r (pair_first, pair_second, centre: int64; vector: float64 x, y, z).
DERIVATIVE_PAIR_BYTES = 48
#: Bytes of a pair's ∂G/∂r per stored column (float32): a radial function has one, an
#: angular one three (x, y, z; docs/store-format.md).
COLUMN_BYTES = 4
#: Bytes a pair takes per function it changes on the torch route (neighbor sums: its
#: (pairs, functions) float64 intermediates), without and with dG/dr (measured 39 and 64
#: on 19,652 Cu atoms, docs/store-format.md).
TORCH_FUNCTION_BYTES = (48.0, 72.0)
#: Bytes an atom takes beside its pairs and twice its float64 features (the values, and
#: their copies as statistics and writes take them): its structure's arrays as read.
ATOM_BYTES = 300
#: Atoms per Å³ assumed where no structure is periodic in all three directions (no density
#: to read): about the densest common solids and liquids (Cu 0.085, Ni 0.091, water 0.10).
DENSE_ATOMS_PER_A3 = 0.1
#: Tasks each worker gets when the data allows (balances uneven partitions and workers).
TASKS_PER_WORKER = 4
#: The work estimate (:func:`estimated_work`, docs/store-format.md "Balanced by work"): a
#: structure costs ``STRUCTURE_WORK`` dense atoms beside its atoms (reading, writing), an
#: atom ``ATOM_PAIRS`` neighbour pairs beside its pairs; structures whose atoms' estimated
#: work differs by less than ``UNEVEN_WORK``× are balanced by atoms, as before.
STRUCTURE_WORK = 0.5
ATOM_PAIRS = 24.0
UNEVEN_WORK = 1.5


class Slots(NamedTuple):
    """Per-partition capacity in a store: ``atoms`` rows and ``structures`` rows."""

    atoms: int
    structures: int


@dataclass(frozen=True, eq=False)
class Plan:
    """Partitions of structures ``[starts[p], stops[p])`` with ``atoms[p]`` atoms each.

    ``starts``/``stops``/``atoms`` are (P,) int64. ``slots`` is the capacity every
    partition gets in a store: the largest partition's atoms and structures.
    """

    starts: np.ndarray
    stops: np.ndarray
    atoms: np.ndarray
    target_atoms: int

    def __post_init__(self) -> None:
        for name in ("starts", "stops", "atoms"):
            arr = np.asarray(getattr(self, name), dtype=np.int64).reshape(-1)
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    @property
    def n_partitions(self) -> int:
        """Number of partitions ``P``."""
        return int(self.starts.shape[0])

    def __len__(self) -> int:
        return self.n_partitions

    @property
    def n_structures(self) -> int:
        """Structures covered by the plan."""
        return int(self.stops[-1]) if self.n_partitions else 0

    @property
    def slots(self) -> Slots:
        """Capacity per partition: ``Slots(atoms=A, structures=K)``."""
        if not self.n_partitions:
            return Slots(1, 1)
        return Slots(int(max(1, self.atoms.max())), int(max(1, (self.stops - self.starts).max())))

    def partition_of(self, structure: int) -> int:
        """The partition holding structure index ``structure``."""
        return int(np.searchsorted(self.stops, structure, side="right"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (stored in zarr attributes)."""
        return {
            "target_atoms": self.target_atoms,
            "starts": self.starts.tolist(),
            "stops": self.stops.tolist(),
            "atoms": self.atoms.tolist(),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Plan:
        """Inverse of :meth:`to_dict`."""
        return Plan(
            starts=np.asarray(d["starts"], np.int64),
            stops=np.asarray(d["stops"], np.int64),
            atoms=np.asarray(d["atoms"], np.int64),
            target_atoms=int(d["target_atoms"]),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]


def neighbours_per_atom(
    atom_counts: np.ndarray, volumes: np.ndarray, periodic: np.ndarray, r_cut: float
) -> tuple[np.ndarray, float]:
    """Estimated neighbours per atom within ``r_cut`` of each structure, (S,) float64, and
    ``k_ref``, the densest periodic structure's (or, without one, that of
    :data:`DENSE_ATOMS_PER_A3`).

    ``n / volume · 4/3·π·r_cut³`` in a cell periodic in all three directions (``volumes``,
    ``periodic``: the index's, same length unit as ``r_cut``); ``min(n − 1, k_ref)`` without
    periodicity (a molecule, a cluster); ``k_ref`` where partly periodic (a slab) or
    unknown (``periodic`` −1).
    """
    counts = np.asarray(atom_counts, np.float64).reshape(-1)  # (S,)
    vol = np.asarray(volumes, np.float64).reshape(-1)  # (S,)
    per = np.asarray(periodic, np.int64).reshape(-1)  # (S,)
    bulk = (per == 3) & (vol > 0)
    sphere = 4.0 / 3.0 * math.pi * float(r_cut) ** 3
    k_bulk = counts[bulk] / vol[bulk] * sphere  # (S_bulk,)
    k_ref = float(k_bulk.max()) if k_bulk.size else DENSE_ATOMS_PER_A3 * sphere
    k = np.full(counts.shape, k_ref)  # partly periodic or unknown: dense
    k[bulk] = k_bulk
    alone = per == 0
    k[alone] = np.minimum(np.maximum(counts[alone] - 1, 0), k_ref)
    return k, k_ref


def estimated_work(
    atom_counts: np.ndarray, volumes: np.ndarray, periodic: np.ndarray, r_cut: float
) -> np.ndarray | None:
    """Work of each structure in atoms of the densest one, (S,) float64, or ``None`` where
    its atoms' work is about even (within :data:`UNEVEN_WORK`×): plan by atoms.

    Neighbours per atom as :func:`neighbours_per_atom` estimates them; ``None`` too without
    a structure periodic in all three (no density to measure the others by).
    """
    counts = np.asarray(atom_counts, np.float64).reshape(-1)  # (S,)
    if counts.size == 0:
        return None
    bulk = (np.asarray(periodic).reshape(-1) == 3) & (np.asarray(volumes).reshape(-1) > 0)
    if not bulk.any():  # no density to measure others by: n - 1 overrates a big cluster
        return None  # (a 2,000-atom one as 1,999 neighbours an atom, ~40-80 within 6 Å)
    k, k_ref = neighbours_per_atom(counts, volumes, periodic, r_cut)
    per_atom = (ATOM_PAIRS + k) / (ATOM_PAIRS + k_ref)  # (S,) ≤ 1
    if per_atom[counts > 0].min(initial=1.0) * UNEVEN_WORK > 1.0:
        return None
    return STRUCTURE_WORK + counts * per_atom


def task_bytes_per_atom(neighbours: Any, values: float, pair_bytes: float) -> Any:
    """A featurize task's estimated peak bytes per dense atom (beside the worker's own
    :data:`WORKER_BYTES`): its ``values`` features (float64, twice), :data:`ATOM_BYTES`,
    and its ``neighbours`` pairs of the neighbour list, each with ``pair_bytes`` more while
    the descriptors are computed (:func:`compiled_pair_bytes`, :func:`torch_pair_bytes`);
    ``neighbours`` a number or an array (then so is the result). Measured peaks lie 13–27 %
    below it (docs/store-format.md)."""
    return 16.0 * values + ATOM_BYTES + neighbours * (NEIGHBOR_BYTES + pair_bytes)


def compiled_pair_bytes(columns: float, derivatives: bool) -> float:
    """Bytes a pair takes beside the list on the compiled kernels: :data:`PAIR_WORK_BYTES`
    and, with ``derivatives``, its derivative arrays of ``columns`` ∂G/∂r columns."""
    if not derivatives:
        return float(PAIR_WORK_BYTES)
    return float(PAIR_WORK_BYTES + DERIVATIVE_PAIR_BYTES + COLUMN_BYTES * columns)


def torch_pair_bytes(functions: float, derivatives: bool) -> float:
    """Bytes a pair takes beside the list on the torch route, for the ``functions`` a
    neighbour changes (:data:`TORCH_FUNCTION_BYTES`)."""
    return TORCH_FUNCTION_BYTES[bool(derivatives)] * functions


#: The share of a worker's memory limit a plan fills (Dask's nanny kills past 95 %).
_KEPT = 0.9


def task_budget(worker_bytes: float | None) -> float:
    """Bytes a featurize task may take: :data:`TASK_BYTES`, or less where a worker's
    memory limit ``worker_bytes`` holds less beside the worker's own :data:`WORKER_BYTES`
    (Dask's nanny kills a worker past 95 % of its limit; 90 % is kept)."""
    if worker_bytes is None or worker_bytes <= 0:
        return float(TASK_BYTES)
    return min(float(TASK_BYTES), _KEPT * worker_bytes - WORKER_BYTES)


def limit_for(task_bytes: float) -> float:
    """The worker memory limit whose :func:`task_budget` holds ``task_bytes`` (its inverse
    below :data:`TASK_BYTES`)."""
    return (task_bytes + WORKER_BYTES) / _KEPT


def memory_atoms(bytes_per_atom: float, budget: float | None = None) -> int:
    """Dense atoms whose :func:`task_bytes_per_atom` fit in ``budget`` bytes (default
    :data:`TASK_BYTES`), at least 1."""
    budget = TASK_BYTES if budget is None else budget
    return max(1, int(budget // max(float(bytes_per_atom), 1.0)))


def _greedy_cuts(cum: np.ndarray, cap: int) -> np.ndarray:
    """Stops of greedy contiguous partitions with ≤ ``cap`` atoms or work (``cum``: its
    prefix sums; a bigger structure alone)."""
    n = cum.shape[0] - 1
    stops = []
    s = 0
    while s < n:
        e = int(np.searchsorted(cum, cum[s] + cap, side="right")) - 1
        e = max(e, s + 1)  # one structure larger than cap: alone
        stops.append(e)
        s = e
    return np.asarray(stops, dtype=np.int64)


def plan_partitions(
    atom_counts: np.ndarray, target_atoms: int, work: np.ndarray | None = None
) -> Plan:
    """Split structures into contiguous partitions of at most ``target_atoms`` atoms, or
    with ``work`` ((S,), in dense atoms: :func:`estimated_work`) of at most that much work.

    Uses the fewest partitions greedy packing allows, then the smallest per-partition
    cap that still fits in that many (binary search), so partitions are balanced.
    A structure with more than ``target_atoms`` atoms gets a partition of its own.
    Cost O(P log S · log target) with P partitions and S structures.
    """
    counts = np.asarray(atom_counts, dtype=np.int64).reshape(-1)  # (S,)
    if target_atoms < 1:
        raise ConfigError(f"target_atoms must be ≥ 1, got {target_atoms}")
    if np.any(counts < 0):
        raise ConfigError("atom counts must be non-negative")
    atoms = np.concatenate([[0], np.cumsum(counts)])  # (S + 1,)
    if counts.size == 0:
        empty = np.zeros(0, np.int64)
        return Plan(empty, empty, empty, target_atoms)
    cum = atoms if work is None else np.concatenate([[0.0], np.cumsum(work)])  # (S + 1,)
    n_parts = len(_greedy_cuts(cum, target_atoms))
    lo = min(target_atoms, max(1, math.ceil(float(cum[-1]) / n_parts)))
    stops = _greedy_cuts(cum, _smallest_cap(cum, n_parts, lo, target_atoms))
    starts = np.concatenate([[0], stops[:-1]])
    return Plan(starts, stops, atoms[stops] - atoms[starts], target_atoms)


def given_partition_atoms(
    value: object, name: str = "partition_atoms (--partition-atoms)"
) -> int | None:
    """``value`` (atoms per partition, as the ``name`` option gave it) checked: ``None``
    (not given: the caller uses :data:`MAX_PARTITION_ATOMS` or derives a size) or a whole
    number ≥ 1; anything else is a :class:`ConfigError` (ingest and featurize alike)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(
            f"{name} must be a whole number of atoms ≥ 1, got {value!r}; leave it out for "
            f"the default ({MAX_PARTITION_ATOMS:,} atoms, or derived from the workers)"
        )
    return int(value)


def derived_partition_atoms(
    atom_counts: np.ndarray,
    n_workers: int,
    work: np.ndarray | None = None,
    memory: int = MAX_PARTITION_ATOMS,
) -> int:
    """Target atoms (or ``work``: as :func:`plan_partitions`) per partition for
    ``n_workers`` workers when none is given.

    About :data:`TASKS_PER_WORKER` partitions per worker, bounded to
    [:data:`MIN_PARTITION_ATOMS`, :data:`MAX_PARTITION_ATOMS`] atoms; data with fewer
    than :data:`MIN_PARTITION_ATOMS` atoms per worker gets one partition per worker,
    of at least :data:`MIN_SPLIT_ATOMS` atoms. Shares are padded by the largest
    structure so that whole structures fill exactly that many partitions
    (:func:`plan_partitions` then balances them). Where the minimum makes a count that is
    not a whole number of rounds of the workers (5 partitions for 2: a last round with one
    idle), the partitions grow to fill the whole rounds below it (4). ``memory``: the
    dense atoms a task's memory allows (:func:`memory_atoms`), a bound above all others.
    """
    counts = np.asarray(atom_counts if work is None else work).reshape(-1)
    upper = max(1, min(MAX_PARTITION_ATOMS, int(memory)))
    if counts.size == 0:
        return min(MIN_SPLIT_ATOMS, upper)
    workers = max(1, int(n_workers))
    total, largest = counts.sum(), math.ceil(counts.max())
    wanted = math.ceil(total / (TASKS_PER_WORKER * workers)) + largest
    one_per_worker = math.ceil(total / workers) + largest
    lower = max(MIN_SPLIT_ATOMS, min(MIN_PARTITION_ATOMS, one_per_worker))
    size = int(min(upper, max(lower, wanted)))
    cum = np.concatenate([[0], np.cumsum(counts)])
    parts = len(_greedy_cuts(cum, size))
    if parts > workers and parts % workers and size < upper:
        whole = parts // workers * workers  # the smallest size fitting in whole rounds
        lo = math.ceil(total / whole)
        size = _smallest_cap(cum, whole, min(lo, upper), min(upper, lo + largest))
    return size


def _smallest_cap(cum: np.ndarray, n_parts: int, lo: int, hi: int) -> int:
    """The smallest cap in [lo, hi] whose greedy packing of the structures (``cum``: their
    atom counts' prefix sums) makes at most ``n_parts`` partitions (``hi`` if none below)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if len(_greedy_cuts(cum, mid)) <= n_parts:
            hi = mid
        else:
            lo = mid + 1
    return lo
