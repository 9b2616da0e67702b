"""``write_input_data``: the labels it writes are the ones dparallel reads from the same
structures (a calculator's, else ``info``/``arrays`` under energy/REF_energy, forces/
REF_forces)."""

from __future__ import annotations

import ase
import ase.io
import numpy as np
from ase.calculators.singlepoint import SinglePointCalculator

from dparallel.io import open_source
from dparallel.n2p2 import write_input_data


def _water(shift: float) -> ase.Atoms:
    return ase.Atoms("OH2", positions=[[0, 0, shift], [0.96, 0, shift], [-0.24, 0.93, shift]])


def test_labels_written_are_the_ones_read(tmp_path):
    """An energy-only calculator made write_input_data fail (PropertyNotImplementedError
    from get_forces), and labels under REF_energy / REF_forces (a MACE-style extxyz as ASE
    reads it) were written as 0."""
    only_energy = _water(0.0)
    only_energy.calc = SinglePointCalculator(only_energy, energy=-14.25)
    ref = _water(3.0)
    ref.info["REF_energy"] = -14.5
    ref.arrays["REF_forces"] = np.array([[0.1, 0.2, 0.3], [-0.1, 0.0, 0.0], [0.0, -0.2, -0.3]])
    both = _water(6.0)
    both.calc = SinglePointCalculator(both, energy=-13.0, forces=np.full((3, 3), 0.5))
    write_input_data(tmp_path / "input.data", [only_energy, ref, both])
    got = open_source(tmp_path / "input.data").read()
    np.testing.assert_allclose(got.energy, [-14.25, -14.5, -13.0], rtol=1e-15)
    expected_forces = [np.zeros((3, 3)), ref.arrays["REF_forces"], both.get_forces()]
    np.testing.assert_allclose(got.forces, np.concatenate(expected_forces), rtol=1e-15)
    ase.io.write(tmp_path / "same.extxyz", [only_energy, ref, both])  # as the reader sees it
    from_extxyz = open_source(tmp_path / "same.extxyz").read()
    np.testing.assert_allclose(got.energy, from_extxyz.energy, rtol=1e-15)
