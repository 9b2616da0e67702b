"""Structures and physically equivalent copies of them, made with ASE's own tools, for the
invariance tests of the whole pipeline (featurize → store → model → deployed paths).
No pytest here.

Each copy comes with the factor n its energy is of the original's (a supercell: its
volume ratio), and the rotation R and translation t it was moved by (x' = x Rᵀ + t);
:func:`image_of` finds each of its atoms' original by ASE-free geometry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from ase import Atoms
from ase.build import fcc111, make_supercell, molecule, niggli_reduce
from ase.build.tools import niggli_reduce_cell
from ase.calculators.emt import EMT
from ase.calculators.singlepoint import SinglePointCalculator
from scipy.spatial.transform import Rotation

ELEMENTS = ["H", "C", "O", "Cu", "Au"]
_NONDIAGONAL = np.array([[1, 1, 0], [-1, 1, 1], [0, 0, 1]])  # det 2
_IN_PLANE = np.array([[1, 1, 0], [-1, 1, 0], [0, 0, 1]])  # det 2, keeps the open axis
_A_APB_C = [[1, 0, 0], [1, 1, 0], [0, 0, 1]]  # lattice vectors (a, a + b, c)


@dataclass
class Copy:
    """``atoms``, equivalent to ``original`` times ``n`` after x → x Rᵀ + t."""

    original: str
    name: str
    atoms: Atoms
    n: int = 1
    rotation: np.ndarray = field(default_factory=lambda: np.eye(3))
    shift: np.ndarray = field(default_factory=lambda: np.zeros(3))


def originals() -> dict[str, Atoms]:
    """A triclinic Cu/Au cell narrower than 4.5 Å, a Cu/Au fcc(111) slab periodic in x, y
    only, ethanol in vacuum, and a 2-atom cell with a 2.4 Å lattice vector; all rattled."""
    rng = np.random.default_rng(0)
    fcc = [[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]]
    bulk = Atoms("CuAuCuAu", cell=[[3.7, 0, 0], [0.9, 3.5, 0], [0.6, -0.7, 3.8]], pbc=True,
                 scaled_positions=fcc)  # fmt: skip
    slab = fcc111("Cu", (2, 2, 2), a=3.7, vacuum=5.0)
    slab.numbers[[1, 6]] = 79
    slab.pbc = (True, True, False)
    ethanol = molecule("CH3CH2OH")
    ethanol.center(vacuum=6.0)
    narrow = Atoms("CuAu", positions=[[0, 0, 0], [1.2, 1.6, 1.8]], pbc=True,
                   cell=[[2.4, 0, 0], [0.5, 3.4, 0], [0.3, 0.4, 3.6]])  # fmt: skip
    out = {"bulk": bulk, "slab": slab, "ethanol": ethanol, "narrow": narrow}
    for atoms in out.values():
        atoms.positions += rng.normal(0, 0.05, atoms.positions.shape)
    return out


def moved(atoms: Atoms, seed: int, reflect: bool = False) -> tuple[Atoms, np.ndarray, np.ndarray]:
    """``atoms`` rotated (and reflected), translated and its atoms permuted, with R and t."""
    rotation = Rotation.random(random_state=seed).as_matrix()
    if reflect:
        rotation = rotation @ np.diag([1.0, 1.0, -1.0])
    rng = np.random.default_rng(seed)
    shift = rng.normal(0, 3, 3)
    out = atoms.copy()
    out.positions = atoms.positions @ rotation.T + shift
    out.cell = atoms.cell.array @ rotation.T
    return out[rng.permutation(len(atoms))], rotation, shift


def _unwrapped(atoms: Atoms, seed: int) -> Atoms:
    """Atoms moved by random whole lattice vectors along the periodic axes."""
    out = atoms.copy()
    steps = np.random.default_rng(seed).integers(-2, 3, (len(atoms), 3)) * atoms.pbc
    out.positions += steps @ atoms.cell.array
    return out


def _recelled(atoms: Atoms, rows: list[list[int]], wrap: bool) -> Atoms:
    """The same crystal with the lattice vectors ``rows`` @ cell (a unimodular matrix)."""
    out = atoms.copy()
    out.set_cell(np.array(rows) @ atoms.cell.array, scale_atoms=False)
    if wrap:
        out.wrap()
    return out


def copies(name: str, atoms: Atoms) -> list[Copy]:
    """``atoms`` itself, its supercells and other cell choices (periodic ones), and a moved
    (rotated, reflected, translated, permuted) copy of it and of a supercell."""
    out = [Copy(name, "original", atoms)]
    if atoms.pbc.all():
        out += [
            Copy(name, "repeat 2x1x2", atoms.repeat((2, 1, 2)), 4),
            Copy(name, "supercell non-diagonal", make_supercell(atoms, _NONDIAGONAL), 2),
            Copy(name, "cell (a, a+b, c)", _recelled(atoms, _A_APB_C, False)),
            Copy(name, "cell (a, a+b, c) wrapped", _recelled(atoms, _A_APB_C, True)),
        ]
        skewed = _recelled(atoms, [[1, 0, 0], [3, 1, 0], [1, -2, 1]], False)
        reduced = skewed.copy()
        niggli_reduce(reduced)  # reduces, wraps and rotates into its standard orientation
        _, op = niggli_reduce_cell(skewed.cell.array)
        rotation = np.linalg.solve(op.T @ skewed.cell.array, reduced.cell.array).T
        out += [Copy(name, "skewed cell", skewed), Copy(name, "Niggli", reduced, 1, rotation)]
    elif atoms.pbc.any():
        out += [
            Copy(name, "repeat 2x3x1", atoms.repeat((2, 3, 1)), 6),
            Copy(name, "supercell non-diagonal", make_supercell(atoms, _IN_PLANE), 2),
            Copy(name, "cell (a, a+b, c)", _recelled(atoms, _A_APB_C, False)),
        ]
    if atoms.pbc.any():
        out.append(Copy(name, "unwrapped", _unwrapped(atoms, 3)))
    out.append(Copy(name, "moved", *_moved_copy(atoms, 11)))
    if atoms.pbc.any():
        big = out[2]
        out.append(Copy(name, "supercell moved", *_moved_copy(big.atoms, 12, big.n)))
    return out


def _moved_copy(atoms: Atoms, seed: int, n: int = 1) -> tuple[Atoms, int, np.ndarray, np.ndarray]:
    new, rotation, shift = moved(atoms, seed, reflect=seed % 2 == 0)
    return new, n, rotation, shift


def all_copies(labelled: bool = True) -> list[Copy]:
    """Every copy of every original, with EMT energies and forces as labels if asked."""
    out = [c for name, atoms in originals().items() for c in copies(name, atoms)]
    if labelled:
        for c in out:
            c.atoms.calc = EMT()
            e, f = c.atoms.get_potential_energy(), c.atoms.get_forces()
            c.atoms.calc = SinglePointCalculator(c.atoms, energy=e, forces=f)
    return out


def image_of(original: Atoms, copy: Copy) -> np.ndarray:
    """For each atom of ``copy`` the atom of ``original`` it is (an image of)."""
    x = (copy.atoms.positions - copy.shift) @ copy.rotation
    d = x[:, None, :] - original.positions[None, :, :]
    frac = d @ np.linalg.inv(original.cell.array)
    whole = np.where(original.pbc, np.round(frac), 0.0)
    miss = np.linalg.norm(d - whole @ original.cell.array, axis=-1)
    miss[copy.atoms.numbers[:, None] != original.numbers[None, :]] = np.inf
    found = miss.argmin(1)
    if not np.all(miss[np.arange(len(x)), found] < 1e-6):
        raise AssertionError(f"{copy.original}/{copy.name}: an atom is no image of the original")
    return found
