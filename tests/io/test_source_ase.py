"""Formats read through ASE (traj, db, LAMMPS dumps, VASP, cif): what a source reads equals
what ``ase.io.read`` gives, labels absent where the file holds none, the planner's view."""

from __future__ import annotations

import ase
import ase.io
import numpy as np
import pytest
from ase.build import bulk, molecule
from ase.calculators.emt import EMT
from ase.calculators.singlepoint import SinglePointCalculator

from dparallel.errors import InputFormatError
from dparallel.io import open_source


def _lammps_dump(path, rng, frames=3, columns="id element x y z fx fy fz"):
    """A LAMMPS text dump (``dump custom``) of ``frames`` frames with forces."""
    text = []
    for step in range(frames):
        n = 3 + step
        text.append(
            f"ITEM: TIMESTEP\n{10 * step}\nITEM: NUMBER OF ATOMS\n{n}\n"
            f"ITEM: BOX BOUNDS pp pp pp\n0 5.0\n0 5.5\n0 6.0\nITEM: ATOMS {columns}\n"
        )
        for i in range(n):
            x, f = rng.uniform(0, 5, 3), rng.normal(size=3)
            text.append(f"{i + 1} Cu {x[0]} {x[1]} {x[2]} {f[0]} {f[1]} {f[2]}\n")
    path.write_text("".join(text))


def test_a_lammps_dump_has_no_energy(tmp_path, rng):
    """ASE attaches energy=0.0 to a dump's forces (ase/io/lammpsrun.py), an energy the file
    does not hold: read as absent (NaN), the forces and everything else as ASE reads them;
    an energy key chosen is then missing, not 0."""
    path = tmp_path / "md.lammpstrj"
    _lammps_dump(path, rng)
    got = open_source(path, "lammps-dump-text").read()
    ref = ase.io.read(path, ":", format="lammps-dump-text")
    assert [a.get_potential_energy() for a in ref] == [0.0] * 3  # ASE's placeholder
    np.testing.assert_array_equal(got.energy, [np.nan] * 3)
    np.testing.assert_array_equal(got.forces, np.concatenate([a.get_forces() for a in ref]))
    np.testing.assert_array_equal(got.positions, np.concatenate([a.positions for a in ref]))
    np.testing.assert_array_equal(got.numbers, np.concatenate([a.numbers for a in ref]))
    np.testing.assert_array_equal(got.cells, [a.cell[:] for a in ref])
    with pytest.raises(InputFormatError, match=r"structure 0: no energy under energy_key"):
        open_source(path, "lammps-dump-text", energy_key="energy").read()


def _mixed_frames() -> list[ase.Atoms]:
    """Bulk (strained), a slab (periodic in two directions) and molecules, EMT-labelled."""
    cu = bulk("Cu", "fcc", a=3.6, cubic=True)
    cu.set_cell(cu.cell[:] @ [[1.02, 0.01, 0], [0, 0.99, 0], [0, 0.03, 1.0]], scale_atoms=True)
    slab = bulk("Cu", "fcc", a=3.6, cubic=True).repeat((1, 1, 2))
    slab.center(vacuum=4.0, axis=2)
    slab.pbc = [True, True, False]
    frames = [cu, slab, molecule("CH4"), molecule("H2O"), bulk("Ni", "fcc", a=3.5)]
    for atoms in frames:
        atoms.calc = EMT()
        atoms.calc = SinglePointCalculator(
            atoms, energy=atoms.get_potential_energy(), forces=atoms.get_forces()
        )
    return frames


@pytest.mark.parametrize("suffix", ["traj", "db"])
def test_the_planner_sees_cells_of_ase_formats(tmp_path, suffix):
    """The index of a .traj / .db holds each structure's periodic directions and volume, as
    the extxyz indexer reads them from the same structures' comment lines (molecules were
    planned as dense solids: "unknown")."""
    frames = _mixed_frames()
    ase.io.write(tmp_path / "ref.extxyz", frames)
    ase.io.write(tmp_path / f"data.{suffix}", frames)
    ref = open_source(tmp_path / "ref.extxyz").index
    got = open_source(tmp_path / f"data.{suffix}").index
    np.testing.assert_array_equal(got.periodic, ref.periodic)
    np.testing.assert_array_equal(got.periodic, [3, 2, 0, 0, 3])
    np.testing.assert_allclose(got.volumes, ref.volumes, rtol=1e-12)
    np.testing.assert_array_equal(got.counts, [len(a) for a in frames])
