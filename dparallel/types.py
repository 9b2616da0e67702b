"""Containers shared by every package, with the shape and unit of each field.

``S`` is the number of structures in a batch, ``N`` the total number of atoms.
Atoms of structure ``s`` are rows ``offsets[s]:offsets[s + 1]``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from dparallel.errors import ArgumentTypeError

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Collection, Iterable, Sequence

    import ase

__all__ = [
    "ENERGY_KEYS",
    "FIELDS",
    "FORCE_KEYS",
    "MAX_DENSITY",
    "MIN_TRANSLATION",
    "LabelKeys",
    "StructureBatch",
]

#: Atoms per cubic length unit above which a periodic cell is no material (diamond holds
#: 0.18 per Å³): a Lattice in the wrong units, which would need millions of periodic
#: images per atom. The readers refuse such a structure; a neighbor list too.
MAX_DENSITY = 5.0

#: The shortest periodic translation, in length units, below which a cell is no material:
#: each atom would lie that close to its own image (nothing bonds closer than ~0.74 Å),
#: so the Lattice is in the wrong units; along a slab's or a wire's periodic axes the
#: density limit cannot see it, and the neighbor list would need millions of images.
MIN_TRANSLATION = 0.5

#: Small integer combinations of three lattice vectors (their search finds the shortest
#: translation of any cell that is not pathologically skewed).
_COMBINATIONS = np.array([c for c in np.ndindex(5, 5, 5) if c != (2, 2, 2)], dtype=np.float64) - 2.0

#: The array fields, per atom (N rows) and per structure (S rows): name → (rows, dtype of
#: a row's values, trailing shape, unit, meaning).
_ARRAYS: dict[str, tuple[str, Any, tuple[int, ...], str, str]] = {
    "numbers": ("N", np.int64, (), "", "atomic numbers"),
    "positions": ("N", np.float64, (3,), "Å", "Cartesian positions"),
    "forces": ("N", np.float64, (3,), "eV/Å", "forces; NaN when absent"),
    "cells": ("S", np.float64, (3, 3), "Å", "cell vectors as rows; zeros when non-periodic"),
    "pbc": ("S", bool, (3,), "", "periodicity along each cell vector"),
    "energy": ("S", np.float64, (), "eV", "total energy; NaN when absent"),
}
_PER_ATOM = {k: (dtype, shape) for k, (rows, dtype, shape, *_) in _ARRAYS.items() if rows == "N"}
_PER_STRUCTURE = {
    k: (dtype, shape) for k, (rows, dtype, shape, *_) in _ARRAYS.items() if rows == "S"
}

#: Every field of a :class:`StructureBatch`: (shape, dtype, unit, meaning).
FIELDS: dict[str, tuple[str, str, str, str]] = {
    **{
        name: (
            f"({', '.join(map(str, (rows, *shape)))}{',' if not shape else ''})",
            np.dtype(dtype).name,
            unit,
            meaning,
        )
        for name, (rows, dtype, shape, unit, meaning) in _ARRAYS.items()
    },
    "offsets": ("(S + 1,)", "int64", "", "first atom row of each structure, then N"),
    "tags": ("(S,)", "str", "", "free label per structure, e.g. n2p2's train|test; '' if none"),
}
_ROWS = (*_PER_ATOM, *_PER_STRUCTURE, "tags")  # every field but offsets


@dataclass(frozen=True, eq=False)
class StructureBatch:
    """A ragged batch of atomic structures held as flat numpy arrays (fields: :data:`FIELDS`);
    built by :meth:`from_ase` or :meth:`concatenate`, converted back by :meth:`to_ase`."""

    numbers: np.ndarray  # (N,) int64
    positions: np.ndarray  # (N, 3) float64, Å
    cells: np.ndarray  # (S, 3, 3) float64, Å
    pbc: np.ndarray  # (S, 3) bool
    energy: np.ndarray  # (S,) float64, eV
    forces: np.ndarray  # (N, 3) float64, eV/Å
    offsets: np.ndarray  # (S + 1,) int64
    tags: np.ndarray = field(default=None)  # type: ignore[arg-type]  # (S,) str

    def __post_init__(self) -> None:
        layout = {**_PER_ATOM, **_PER_STRUCTURE, "offsets": (np.int64, ())}
        for name, (dtype, row) in layout.items():
            value = np.ascontiguousarray(getattr(self, name), dtype=dtype).reshape(-1, *row)
            object.__setattr__(self, name, value)
        n_structures = self.offsets.shape[0] - 1
        tags = np.full(n_structures, "") if self.tags is None else self.tags
        object.__setattr__(self, "tags", np.asarray(tags, dtype=object).reshape(-1))
        n_atoms = self.numbers.shape[0]
        problems = []
        if n_structures < 0 or (n_structures >= 0 and self.offsets[0] != 0):
            problems.append("offsets must start at 0")
        if self.offsets[-1] != n_atoms:
            problems.append(f"offsets end at {self.offsets[-1]} but there are {n_atoms} atoms")
        if np.any(np.diff(self.offsets) < 0):
            problems.append("offsets must be non-decreasing")
        for name in _ROWS:
            n, rows = n_atoms if name in _PER_ATOM else n_structures, getattr(self, name).shape[0]
            if rows != n:
                problems.append(f"{name} has {rows} rows, expected {n}")
        if problems:
            raise ValueError("inconsistent StructureBatch: " + "; ".join(problems))

    @property
    def n_structures(self) -> int:
        """Number of structures ``S``."""
        return int(self.offsets.shape[0] - 1)

    @property
    def n_atoms(self) -> int:
        """Total number of atoms ``N``."""
        return int(self.numbers.shape[0])

    @property
    def atom_counts(self) -> np.ndarray:
        """Atoms per structure, shape (S,)."""
        return np.diff(self.offsets)

    def densities(self) -> np.ndarray:
        """Atoms per cubic length unit of each structure periodic along all three axes with
        a finite, non-singular cell, shape (S,); 0 for every other structure (compared with
        :data:`MAX_DENSITY`)."""
        n = self.n_structures
        bulk = self.pbc.all(axis=1) & np.isfinite(self.cells).reshape(n, 9).all(axis=1)
        volume = np.abs(np.linalg.det(np.where(bulk[:, None, None], self.cells, np.eye(3))))
        bulk &= volume > 1e-10
        return np.where(bulk, self.atom_counts / np.where(bulk, volume, 1.0), 0.0)

    def shortest_translations(self) -> np.ndarray:
        """Length of the shortest periodic translation of each structure (a combination of
        its periodic cell vectors with coefficients up to ±2), shape (S,); ``inf`` where no
        axis is periodic or the cell is not finite (compared with :data:`MIN_TRANSLATION`)."""
        n = self.n_structures
        finite = np.isfinite(self.cells).reshape(n, 9).all(axis=1)
        cells = np.where(finite[:, None, None], self.cells, 0.0)
        # once per distinct (cell, pbc): most structures of a file share a few cells, and
        # the search is ~14 µs a structure (every read and neighbor list makes it)
        rows = np.concatenate([cells.reshape(n, 9), self.pbc.astype(np.float64)], axis=1)
        distinct, which = np.unique(rows, axis=0, return_inverse=True)  # (U, 12)
        cells, pbc = distinct[:, :9].reshape(-1, 3, 3), distinct[:, 9:] != 0
        uses_open_axis = (_COMBINATIONS[None, :, :] != 0) & ~pbc[:, None, :]  # (U, C, 3)
        lengths = np.linalg.norm(np.einsum("ck,skx->scx", _COMBINATIONS, cells), axis=2)
        lengths[uses_open_axis.any(axis=2)] = np.inf
        shortest = lengths.min(axis=1, initial=np.inf)[which.reshape(-1)]
        return np.where(finite & self.pbc.any(axis=1), shortest, np.inf)

    def implausible_cells(self) -> dict[int, str]:
        """Structures whose periodic cell is no material, by index, with the reason: denser
        than :data:`MAX_DENSITY`, or a periodic translation under :data:`MIN_TRANSLATION`
        (a Lattice in the wrong units, whose neighbor list would need millions of images).
        A singular cell (density 0, a translation of ~0) is left to its own check."""
        counts = self.atom_counts
        density = self.densities()
        shortest = self.shortest_translations()
        found: dict[int, str] = {}
        for s in np.flatnonzero(density > MAX_DENSITY).tolist():
            found[s] = (
                f"{counts[s]} atoms in a periodic cell of {counts[s] / density[s]:.3g} (length "
                f"unit)³: denser than any material (limit {MAX_DENSITY:g} per unit³, diamond "
                "holds 0.18 per Å³); check the Lattice and its units"
            )
        for s in np.flatnonzero((shortest < MIN_TRANSLATION) & (shortest > 1e-8)).tolist():
            found.setdefault(
                s,
                f"a periodic translation of {shortest[s]:.3g} (length unit) along pbc="
                f"{self.pbc[s].tolist()} puts each atom that close to its own image: no "
                f"material (limit {MIN_TRANSLATION:g}); check the Lattice and its units",
            )
        return dict(sorted(found.items()))

    @property
    def structure_index(self) -> np.ndarray:
        """Structure of each atom row, shape (N,)."""
        return np.repeat(np.arange(self.n_structures, dtype=np.int64), self.atom_counts)

    def __len__(self) -> int:
        return self.n_structures

    def select(self, start: int, stop: int) -> StructureBatch:
        """Structures ``[start, stop)`` as a new batch (views where possible)."""
        start, stop, _ = slice(start, stop).indices(self.n_structures)
        stop = max(start, stop)
        a, b = int(self.offsets[start]), int(self.offsets[stop])
        return StructureBatch(
            **{name: getattr(self, name)[a:b] for name in _PER_ATOM},
            **{name: getattr(self, name)[start:stop] for name in (*_PER_STRUCTURE, "tags")},
            offsets=self.offsets[start : stop + 1] - a,
        )

    def take(self, indices: Sequence[int] | np.ndarray) -> StructureBatch:
        """The structures at ``indices`` (any order) as a new batch."""
        return StructureBatch.concatenate(
            [self.select(i, i + 1) for i in np.ravel(indices).tolist()]
        )

    def with_positions(self, positions: np.ndarray) -> StructureBatch:
        """This batch with ``positions`` (N, 3) Å (copied) instead of its own: same atoms,
        cells and labels, not validated again (validation would be a noticeable part of an
        MD step: docs/deploy.md)."""
        positions = np.array(positions, dtype=np.float64, order="C")
        if positions.shape != self.positions.shape:
            raise ValueError(f"positions {positions.shape}, the batch has {self.positions.shape}")
        new = copy.copy(self)  # no __post_init__: the other fields were validated already
        object.__setattr__(new, "positions", positions)
        return new

    @staticmethod
    def concatenate(batches: Iterable[StructureBatch]) -> StructureBatch:
        """Join batches in order."""
        batches = list(batches)
        if not batches:
            return StructureBatch.empty()
        counts = np.concatenate([b.atom_counts for b in batches])
        return StructureBatch(
            **{name: np.concatenate([getattr(b, name) for b in batches]) for name in _ROWS},
            offsets=np.concatenate([[0], np.cumsum(counts)]),
        )

    @staticmethod
    def empty() -> StructureBatch:
        """A batch with no structures."""
        layout = {**_PER_ATOM, **_PER_STRUCTURE}
        return StructureBatch(
            **{name: np.zeros((0, *row), dtype) for name, (dtype, row) in layout.items()},
            offsets=np.zeros(1, np.int64),
        )

    @staticmethod
    def from_ase(
        structures: ase.Atoms | Iterable[ase.Atoms],
        *,
        energy_key: str | None = None,
        forces_key: str | None = None,
        labels: bool = True,
    ) -> StructureBatch:
        """Build a batch from ASE ``Atoms`` (one, or an iterable of them); energy/forces from
        an attached calculator or info/arrays (:class:`LabelKeys`: ``energy_key`` /
        ``forces_key`` name the ``info`` / ``arrays`` key or calculator result to take
        instead, and a structure without it is a ``ValueError``); ``labels=False``: none
        read (NaN; no calculator is called). Anything else is an
        :class:`~dparallel.errors.ArgumentTypeError` naming its index."""
        import ase

        if isinstance(structures, ase.Atoms):
            frames = [structures]
        elif not hasattr(structures, "__iter__"):
            raise ArgumentTypeError(
                f"from_ase: a {type(structures).__name__} is not an ase.Atoms or an iterable "
                "of them"
            )
        else:
            frames = list(structures)
        for k, a in enumerate(frames):
            if not isinstance(a, ase.Atoms):
                hint = (
                    " (a file: read it with dparallel.io.open_source)"
                    if k == 0 and isinstance(structures, str)
                    else ""
                )
                raise ArgumentTypeError(
                    f"from_ase: structure {k} is a {type(a).__name__}, not an ase.Atoms{hint}"
                )
        if not frames:
            return StructureBatch.empty()
        if not labels:
            n = sum(len(a) for a in frames)
            return _ase_batch(frames, np.full(len(frames), np.nan), np.full((n, 3), np.nan))
        keys = LabelKeys(energy_key, forces_key)
        for k, a in enumerate(frames):
            reason = keys.absent_from_ase(a)
            if reason is not None:
                raise ValueError(f"from_ase: structure {k}: {reason}")
        energies = [_ase_label(a, "get_potential_energy", keys.energy_keys(), ()) for a in frames]
        forces = [_ase_label(a, "get_forces", keys.force_keys(), (len(a), 3)) for a in frames]
        return _ase_batch(frames, np.asarray(energies), np.concatenate(forces))

    def to_ase(self) -> list[ase.Atoms]:
        """One ``ase.Atoms`` per structure, with energy and forces in a SinglePointCalculator."""
        import ase
        from ase.calculators.singlepoint import SinglePointCalculator

        out = []
        for s in range(self.n_structures):
            a, b = int(self.offsets[s]), int(self.offsets[s + 1])
            atoms = ase.Atoms(
                numbers=self.numbers[a:b],
                positions=self.positions[a:b],
                cell=self.cells[s],
                pbc=self.pbc[s],
            )
            energy, f = self.energy[s], self.forces[a:b]
            results: dict[str, Any] = {"energy": float(energy)} if np.isfinite(energy) else {}
            if b > a and np.all(np.isfinite(f)):
                results["forces"] = f.copy()
            if results:
                atoms.calc = SinglePointCalculator(atoms, **results)
            if self.tags[s]:
                atoms.info["set"] = self.tags[s]
            out.append(atoms)
        return out

    def equals(self, other: StructureBatch) -> bool:
        """Exact equality of every field (NaN equals NaN)."""
        return all(
            np.array_equal(getattr(self, n), getattr(other, n), equal_nan=n in _LABELS)
            for n in (*_PER_ATOM, *_PER_STRUCTURE, "offsets")
        ) and list(self.tags) == list(other.tags)


_LABELS = ("energy", "forces")  # NaN: absent
#: Where a label is read from by default, first found wins: an extxyz comment line's key or
#: an ``atoms.info`` key for the energy, a ``Properties`` column or ``atoms.arrays`` key for
#: the forces (docs/io.md). Any other (``free_energy``, ``dft_energy``) is read only when
#: chosen (:class:`LabelKeys`).
ENERGY_KEYS = ("energy", "REF_energy")
FORCE_KEYS = ("forces", "REF_forces")


class LabelKeys(NamedTuple):
    """The keys the labels are read from: ``energy`` (an extxyz comment-line key, an
    ``atoms.info`` key or calculator result) and ``forces`` (a ``Properties`` column, an
    ``atoms.arrays`` key or calculator result). ``None``: the defaults (:data:`ENERGY_KEYS`,
    :data:`FORCE_KEYS`, first found; NaN where absent); a key given must be in every
    structure (docs/io.md)."""

    energy: str | None = None
    forces: str | None = None

    def energy_keys(self) -> tuple[str, ...]:
        """The keys the energy is looked up under, in order."""
        return ENERGY_KEYS if self.energy is None else (self.energy,)

    def force_keys(self) -> tuple[str, ...]:
        """The keys the forces are looked up under, in order."""
        return FORCE_KEYS if self.forces is None else (self.forces,)

    def given(self) -> dict[str, str]:
        """``{"energy_key": …, "forces_key": …}`` of the keys given (none: ``{}``)."""
        pairs = (("energy_key", self.energy), ("forces_key", self.forces))
        return {name: key for name, key in pairs if key is not None}

    def absent(
        self, energy_keys: Collection[str], force_keys: Collection[str], where: tuple[str, str]
    ) -> str | None:
        """Why a structure whose energy can come from ``energy_keys`` and forces from
        ``force_keys`` lacks a key given (``where``: how the two kinds of key are called
        in it, e.g. ``("comment-line keys", "Properties columns")``); ``None`` if it has
        them."""
        for kind, key, present, called in (
            ("energy", self.energy, energy_keys, where[0]),
            ("forces", self.forces, force_keys, where[1]),
        ):
            if key is not None and key not in present:
                listed = ", ".join(sorted(present)) or "none"
                return (
                    f"no {kind} under {kind}_key {key!r}: its {called} are {listed}; give the "
                    f"one that holds the {kind} (--{kind}-key, dataset.{kind}_key), or, in "
                    "ingest and featurize, leave such structures out (--on-error skip)"
                )
        return None

    def absent_from_ase(self, atoms: ase.Atoms) -> str | None:
        """:meth:`absent` for an ASE structure: its ``info`` keys and ``arrays`` (beside
        numbers and positions), each with its calculator's results."""
        results = list(getattr(atoms.calc, "results", {}) or {})
        arrays = [k for k in atoms.arrays if k not in ("numbers", "positions")]
        where = ("info keys and calculator results", "arrays and calculator results")
        return self.absent([*atoms.info, *results], [*arrays, *results], where)


def _ase_batch(frames: list[ase.Atoms], energy: np.ndarray, forces: np.ndarray) -> StructureBatch:
    """The batch of ``frames`` with these labels (:meth:`StructureBatch.from_ase`)."""
    return StructureBatch(
        numbers=np.concatenate([a.get_atomic_numbers() for a in frames]),
        positions=np.concatenate([a.get_positions() for a in frames]),
        cells=np.stack([a.get_cell()[:] for a in frames]),
        pbc=np.stack([a.get_pbc() for a in frames]),
        energy=energy,
        forces=forces,
        offsets=np.concatenate([[0], np.cumsum([len(a) for a in frames])]),
        tags=np.asarray([str(a.info.get("set", a.info.get("tag", ""))) for a in frames]),
    )


def _ase_label(
    atoms: ase.Atoms, method: str, keys: tuple[str, ...], shape: tuple[int, ...]
) -> np.ndarray:
    """A label of ``shape`` (energy: ``shape == ()``, from ``info``; forces: from ``arrays``):
    the default ``keys``: the attached calculator's ``method``, else the first key present;
    a key chosen (:class:`LabelKeys`): under it, or among the calculator's results. NaN
    when absent."""
    where = atoms.info if shape == () else atoms.arrays
    if keys not in (ENERGY_KEYS, FORCE_KEYS):  # a key chosen
        results = getattr(atoms.calc, "results", None) or {}
        value = where[keys[0]] if keys[0] in where else results.get(keys[0])
        return np.reshape(np.asarray(value, np.float64), shape)
    if atoms.calc is not None:
        try:
            return np.reshape(np.asarray(getattr(atoms.calc, method)(atoms), np.float64), shape)
        except Exception:  # noqa: BLE001 - a calculator without the label means "absent"
            pass
    value = next((where[key] for key in keys if key in where), None)
    if value is None:
        return np.full(shape, np.nan)
    return np.reshape(np.asarray(value, np.float64), shape)
