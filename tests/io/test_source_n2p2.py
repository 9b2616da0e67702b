"""n2p2 ``input.data``: hand-made values, units, tags, equality with extxyz of the same data."""

from __future__ import annotations

import ase.io
import numpy as np
import pytest
from ase.calculators.singlepoint import SinglePointCalculator
from ase.units import Bohr, Hartree

from dparallel.io import open_source
from dparallel.io.synthetic import random_structures
from dparallel.types import StructureBatch

HAND = """\
begin set=train
comment water molecule
atom 0.0 0.0 0.0 O -0.8 0.0 0.1 -0.2 0.3
atom 1.5 0.0 0.0 H 0.4 0.0 -0.05 0.1 0.0
atom -0.5 1.25 0.0 H 0.4 0.0 -0.05 0.1 -0.3
energy -76.25
charge 0.0
end
begin set=test
comment bulk
lattice 4.0 0.0 0.0
lattice 0.0 5.0 0.0
lattice 0.5 0.0 6.0
atom 0.1 0.2 0.3 Si 0.0 0.0 1.0 2.0 3.0
atom 2.0 2.5 3.0 Si 0.0 0.0 -1.0 -2.0 -3.0
energy -10.5
charge 0.0
end
"""


@pytest.fixture
def hand_file(tmp_path):
    path = tmp_path / "input.data"
    path.write_text(HAND)
    return path


def test_hand_made_values(hand_file):
    src = open_source(hand_file)
    assert src.format == "n2p2" and len(src) == 2
    np.testing.assert_array_equal(src.atom_counts, [3, 2])
    b = src.read(0, 2)
    np.testing.assert_array_equal(b.numbers, [8, 1, 1, 14, 14])
    np.testing.assert_array_equal(b.offsets, [0, 3, 5])
    np.testing.assert_array_equal(b.positions[1], [1.5, 0.0, 0.0])
    np.testing.assert_array_equal(b.positions[2], [-0.5, 1.25, 0.0])
    np.testing.assert_array_equal(b.forces[0], [0.1, -0.2, 0.3])
    np.testing.assert_array_equal(b.forces[4], [-1.0, -2.0, -3.0])
    np.testing.assert_array_equal(b.energy, [-76.25, -10.5])
    np.testing.assert_array_equal(b.cells[0], np.zeros((3, 3)))
    np.testing.assert_array_equal(b.cells[1], [[4, 0, 0], [0, 5, 0], [0.5, 0, 6]])
    np.testing.assert_array_equal(b.pbc, [[False] * 3, [True] * 3])
    assert list(b.tags) == ["train", "test"]
    assert src.read(1, 2).equals(b.select(1, 2))


def test_units_bohr_hartree(hand_file):
    plain = open_source(hand_file).read(0, 2)
    conv = open_source(hand_file, units="bohr-hartree").read(0, 2)
    np.testing.assert_allclose(conv.positions, plain.positions * Bohr, rtol=1e-12)
    np.testing.assert_allclose(conv.cells, plain.cells * Bohr, rtol=1e-12)
    np.testing.assert_allclose(conv.energy, plain.energy * Hartree, rtol=1e-12)
    np.testing.assert_allclose(conv.forces, plain.forces * Hartree / Bohr, rtol=1e-12)
    # known numbers: 1.5 Bohr = 0.793766 Å; -10.5 Ha = -285.7196 eV
    assert conv.positions[1, 0] == pytest.approx(0.79376581600, rel=1e-9)
    assert conv.energy[1] == pytest.approx(-285.71955325585, rel=1e-9)


def _write_n2p2(path, frames):
    """Format ASE structures as input.data with plain f-strings (independent of the reader)."""
    lines = []
    for k, at in enumerate(frames):
        lines += [f"begin set={'test' if k % 3 == 0 else 'train'}", f"comment frame {k}"]
        if at.pbc.any():
            lines += ["lattice {!r} {!r} {!r}".format(*map(float, v)) for v in at.cell[:]]
        f = at.get_forces()
        for s, p, fi in zip(at.get_chemical_symbols(), at.positions, f, strict=True):
            lines.append(
                "atom {!r} {!r} {!r} {} 0.0 0.0 {!r} {!r} {!r}".format(
                    *map(float, p), s, *map(float, fi)
                )
            )
        lines += [f"energy {float(at.get_potential_energy())!r}", "charge 0.0", "end"]
    path.write_text("\n".join(lines) + "\n")


def test_n2p2_equals_extxyz_of_same_structures(tmp_path, rng):
    frames = random_structures(60, rng, periodic_fraction=0.5)
    for at in frames:  # n2p2 has all-or-nothing periodicity; ASE writes 8 decimals
        e, f = round(at.get_potential_energy(), 6), at.get_forces().round(6)
        at.pbc = at.pbc.all()
        at.positions = at.positions.round(6)
        at.cell = at.cell[:].round(6)
        at.calc = SinglePointCalculator(at, energy=e, forces=f)
    _write_n2p2(tmp_path / "input.data", frames)
    ase.io.write(tmp_path / "same.xyz", frames, format="extxyz")
    a = open_source(tmp_path / "input.data").read(0, 60)
    b = open_source(tmp_path / "same.xyz").read(0, 60)
    for name in ("numbers", "positions", "cells", "pbc", "energy", "forces", "offsets"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    expect_tags = ["test" if k % 3 == 0 else "train" for k in range(60)]
    assert list(a.tags) == expect_tags
    ref = StructureBatch.from_ase(frames)
    np.testing.assert_array_equal(a.positions, ref.positions)


def test_format_detected_by_content_and_option(tmp_path, hand_file):
    other = tmp_path / "train_set.txt"
    other.write_text(HAND)
    assert open_source(other).format == "n2p2"
    assert open_source(hand_file, format="runner").format == "n2p2"


def test_split_marker_is_read_from_begin_only_as_n2p2_reads_it(tmp_path):
    """n2p2 (Structure::readFromLines) takes set=train|test from the ``begin`` line, the last
    one winning, and refuses any other ``begin`` argument; a ``comment`` is free text."""
    from dparallel.errors import InputFormatError

    block = HAND.split("end\n")[0] + "end\n"  # the water molecule
    body = block.split("\n", 2)[2]  # after its begin and comment lines
    heads = [
        ("begin set=test\ncomment s0\n", "test"),
        ("begin\ncomment set=test\n", ""),  # n2p2 trains on it: so does dparallel
        ("begin\ncomment bulk set=train\n", ""),
        ("begin  set=train \t\ncomment x\n", "train"),
        ("begin set=train set=test\n", "test"),
    ]
    path = tmp_path / "input.data"
    path.write_text("".join(h + body for h, _ in heads))
    assert list(open_source(path).read().tags) == [t for _, t in heads]
    for bad, line in [("begin foo\n", 1), ("begin set=validation\n", 1), ("begin set=TEST\n", 1)]:
        path.write_text(HAND + bad + body)
        with pytest.raises(InputFormatError) as err:
            open_source(path).read()
        msg = str(err.value)
        assert f"{path}, line {HAND.count(chr(10)) + line}" in msg
        assert f"unknown 'begin' argument {bad.split()[1]!r}" in msg
        assert "n2p2 accepts only set=train or set=test" in msg


@pytest.mark.parametrize("suffix", ["bz2", "xz"])
def test_a_compressed_input_data_reads_as_the_plain_one(hand_file, tmp_path, suffix):
    import bz2
    import lzma

    pack = bz2.compress if suffix == "bz2" else lzma.compress
    packed = tmp_path / f"input.data.{suffix}"
    packed.write_bytes(pack(hand_file.read_bytes()))
    source = open_source(packed)
    assert source.format == "n2p2"
    assert source.read().equals(open_source(hand_file).read())
