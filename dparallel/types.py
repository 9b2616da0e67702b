"""Containers shared by every package, with the shape and unit of each field.

``S`` is the number of structures in a batch, ``N`` the total number of atoms.
Atoms of structure ``s`` are rows ``offsets[s]:offsets[s + 1]``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable, Sequence

    import ase

__all__ = ["FIELDS", "StructureBatch"]

#: Every field of a :class:`StructureBatch`: (shape, dtype, unit, meaning).
FIELDS: dict[str, tuple[str, str, str, str]] = {
    "numbers": ("(N,)", "int64", "", "atomic numbers"),
    "positions": ("(N, 3)", "float64", "Å", "Cartesian positions"),
    "cells": ("(S, 3, 3)", "float64", "Å", "cell vectors as rows; zeros when non-periodic"),
    "pbc": ("(S, 3)", "bool", "", "periodicity along each cell vector"),
    "energy": ("(S,)", "float64", "eV", "total energy; NaN when absent"),
    "forces": ("(N, 3)", "float64", "eV/Å", "forces; NaN when absent"),
    "offsets": ("(S + 1,)", "int64", "", "first atom row of each structure, then N"),
    "tags": ("(S,)", "str", "", "free label per structure, e.g. n2p2 set=train|test; '' if none"),
}


@dataclass(frozen=True, eq=False)
class StructureBatch:
    """A ragged batch of atomic structures held as flat numpy arrays.

    Attributes follow :data:`FIELDS`. Construct with :meth:`from_ase` or
    :meth:`concatenate`, convert back with :meth:`to_ase`.
    """

    numbers: np.ndarray  # (N,) int64
    positions: np.ndarray  # (N, 3) float64, Å
    cells: np.ndarray  # (S, 3, 3) float64, Å
    pbc: np.ndarray  # (S, 3) bool
    energy: np.ndarray  # (S,) float64, eV
    forces: np.ndarray  # (N, 3) float64, eV/Å
    offsets: np.ndarray  # (S + 1,) int64
    tags: np.ndarray = field(default=None)  # type: ignore[arg-type]  # (S,) str

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "numbers", np.ascontiguousarray(self.numbers, dtype=np.int64).reshape(-1))
        set_(
            self, "positions", np.ascontiguousarray(self.positions, dtype=np.float64).reshape(-1, 3)
        )
        set_(self, "cells", np.ascontiguousarray(self.cells, dtype=np.float64).reshape(-1, 3, 3))
        set_(self, "pbc", np.ascontiguousarray(self.pbc, dtype=bool).reshape(-1, 3))
        set_(self, "energy", np.ascontiguousarray(self.energy, dtype=np.float64).reshape(-1))
        set_(self, "forces", np.ascontiguousarray(self.forces, dtype=np.float64).reshape(-1, 3))
        set_(self, "offsets", np.ascontiguousarray(self.offsets, dtype=np.int64).reshape(-1))
        n_structures = self.offsets.shape[0] - 1
        if self.tags is None:
            set_(self, "tags", np.full(n_structures, "", dtype=object))
        else:
            set_(self, "tags", np.asarray(self.tags, dtype=object).reshape(-1))
        n_atoms = self.numbers.shape[0]
        problems = []
        if n_structures < 0 or (n_structures >= 0 and self.offsets[0] != 0):
            problems.append("offsets must start at 0")
        if self.offsets[-1] != n_atoms:
            problems.append(f"offsets end at {self.offsets[-1]} but there are {n_atoms} atoms")
        if np.any(np.diff(self.offsets) < 0):
            problems.append("offsets must be non-decreasing")
        for name, arr, n in (
            ("positions", self.positions, n_atoms),
            ("forces", self.forces, n_atoms),
            ("cells", self.cells, n_structures),
            ("pbc", self.pbc, n_structures),
            ("energy", self.energy, n_structures),
            ("tags", self.tags, n_structures),
        ):
            if arr.shape[0] != n:
                problems.append(f"{name} has {arr.shape[0]} rows, expected {n}")
        if problems:
            raise ValueError("inconsistent StructureBatch: " + "; ".join(problems))

    # ------------------------------------------------------------------ sizes
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

    @property
    def structure_index(self) -> np.ndarray:
        """Structure of each atom row, shape (N,)."""
        return np.repeat(np.arange(self.n_structures, dtype=np.int64), self.atom_counts)

    def __len__(self) -> int:
        return self.n_structures

    # ------------------------------------------------------------- slicing
    def select(self, start: int, stop: int) -> StructureBatch:
        """Structures ``[start, stop)`` as a new batch (views where possible)."""
        start, stop, _ = slice(start, stop).indices(self.n_structures)
        stop = max(start, stop)
        a, b = int(self.offsets[start]), int(self.offsets[stop])
        return StructureBatch(
            numbers=self.numbers[a:b],
            positions=self.positions[a:b],
            cells=self.cells[start:stop],
            pbc=self.pbc[start:stop],
            energy=self.energy[start:stop],
            forces=self.forces[a:b],
            offsets=self.offsets[start : stop + 1] - a,
            tags=self.tags[start:stop],
        )

    def take(self, indices: Sequence[int] | np.ndarray) -> StructureBatch:
        """The structures at ``indices`` (any order) as a new batch."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        return StructureBatch.concatenate([self.select(int(i), int(i) + 1) for i in idx])

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
            numbers=np.concatenate([b.numbers for b in batches]),
            positions=np.concatenate([b.positions for b in batches]),
            cells=np.concatenate([b.cells for b in batches]),
            pbc=np.concatenate([b.pbc for b in batches]),
            energy=np.concatenate([b.energy for b in batches]),
            forces=np.concatenate([b.forces for b in batches]),
            offsets=np.concatenate([[0], np.cumsum(counts)]),
            tags=np.concatenate([b.tags for b in batches]),
        )

    @staticmethod
    def empty() -> StructureBatch:
        """A batch with no structures."""
        return StructureBatch(
            numbers=np.zeros(0, np.int64),
            positions=np.zeros((0, 3)),
            cells=np.zeros((0, 3, 3)),
            pbc=np.zeros((0, 3), bool),
            energy=np.zeros(0),
            forces=np.zeros((0, 3)),
            offsets=np.zeros(1, np.int64),
        )

    # ------------------------------------------------------------------ ASE
    @staticmethod
    def from_ase(structures: Iterable[ase.Atoms]) -> StructureBatch:
        """Build a batch from ASE ``Atoms``; energy/forces from an attached calculator or info."""
        numbers, positions, cells, pbcs, energies, forces, counts, tags = (
            [],
            [],
            [],
            [],
            [],
            [],
            [],
            [],
        )
        for atoms in structures:
            n = len(atoms)
            numbers.append(atoms.get_atomic_numbers())
            positions.append(atoms.get_positions())
            cells.append(np.asarray(atoms.get_cell()[:], dtype=np.float64))
            pbcs.append(np.asarray(atoms.get_pbc(), dtype=bool))
            energies.append(_ase_energy(atoms))
            forces.append(_ase_forces(atoms, n))
            counts.append(n)
            tags.append(str(atoms.info.get("set", atoms.info.get("tag", ""))))
        if not counts:
            return StructureBatch.empty()
        return StructureBatch(
            numbers=np.concatenate(numbers),
            positions=np.concatenate(positions),
            cells=np.stack(cells),
            pbc=np.stack(pbcs),
            energy=np.asarray(energies, dtype=np.float64),
            forces=np.concatenate(forces),
            offsets=np.concatenate([[0], np.cumsum(counts)]),
            tags=np.asarray(tags, dtype=object),
        )

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
            results: dict[str, Any] = {}
            if np.isfinite(self.energy[s]):
                results["energy"] = float(self.energy[s])
            f = self.forces[a:b]
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
        return (
            np.array_equal(self.numbers, other.numbers)
            and np.array_equal(self.positions, other.positions)
            and np.array_equal(self.cells, other.cells)
            and np.array_equal(self.pbc, other.pbc)
            and np.array_equal(self.energy, other.energy, equal_nan=True)
            and np.array_equal(self.forces, other.forces, equal_nan=True)
            and np.array_equal(self.offsets, other.offsets)
            and list(self.tags) == list(other.tags)
        )


def _ase_energy(atoms: ase.Atoms) -> float:
    calc = atoms.calc
    if calc is not None:
        try:
            return float(calc.get_potential_energy(atoms))
        except Exception:  # noqa: BLE001 - a calculator without energy means "absent"
            pass
    for key in ("energy", "REF_energy", "free_energy"):
        if key in atoms.info:
            return float(atoms.info[key])
    return float("nan")


def _ase_forces(atoms: ase.Atoms, n: int) -> np.ndarray:
    calc = atoms.calc
    if calc is not None:
        try:
            return np.asarray(calc.get_forces(atoms), dtype=np.float64).reshape(n, 3)
        except Exception:  # noqa: BLE001 - a calculator without forces means "absent"
            pass
    for key in ("forces", "REF_forces"):
        if key in atoms.arrays:
            return np.asarray(atoms.arrays[key], dtype=np.float64).reshape(n, 3)
    return np.full((n, 3), np.nan)
