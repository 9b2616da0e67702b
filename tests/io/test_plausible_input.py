"""Coordinates of implausible magnitude are refused (raise) or skipped (skip), named."""

from __future__ import annotations

import logging

import pytest

from dparallel.errors import InvalidStructureError
from dparallel.io import open_source
from dparallel.io._validate import MAX_COORDINATE

GOOD = """2
Properties=species:S:1:pos:R:3 energy=-1.5 pbc="F F F"
H 0.0 0.0 0.0
H 0.0 0.0 0.74
"""


def _frame(z: str, lattice: str = "") -> str:
    pbc = 'pbc="F F F"' if not lattice else f'Lattice="{lattice}" pbc="T T T"'
    return f"2\nProperties=species:S:1:pos:R:3 energy=-1.0 {pbc}\nH 0 0 0\nH 0 0 {z}\n"


@pytest.mark.parametrize("z", ["1e30", "-2e5", "100001"])
def test_a_far_coordinate_is_an_error_under_raise(tmp_path, z):
    path = tmp_path / "in.extxyz"
    path.write_text(GOOD + _frame(z) + GOOD)
    with pytest.raises(InvalidStructureError, match=r"structure 1: atom 1: implausible coord"):
        open_source(path).read()


def test_a_far_coordinate_is_skipped_and_recorded_under_skip(tmp_path):
    path = tmp_path / "in.extxyz"
    path.write_text(GOOD + _frame("1e30") + GOOD)
    result = open_source(path, on_error="skip").read_checked()
    assert result.indices.tolist() == [0, 2]
    assert [i for i, _ in result.skipped] == [1]
    assert "implausible" in result.skipped[0][1] and "line 8" in result.skipped[0][1]


def test_the_threshold_itself_is_accepted(tmp_path):
    path = tmp_path / "in.extxyz"
    path.write_text(GOOD + _frame(repr(MAX_COORDINATE)) + _frame(f"{-MAX_COORDINATE!r}"))
    assert open_source(path).read().n_structures == 3


def test_an_implausible_cell_is_refused(tmp_path):
    path = tmp_path / "in.extxyz"
    path.write_text(GOOD + _frame("0.74", "1e30 0 0 0 10 0 0 0 10"))
    with pytest.raises(InvalidStructureError, match="cell has implausible entries"):
        open_source(path).read()


def test_a_cell_denser_than_any_material_is_refused_and_skippable(tmp_path):
    """A Lattice in the wrong units (0.05 Å cube): refused by the reader, naming the line;
    under ``on_error="skip"`` the rest is read (a neighbor list would never finish)."""
    path = tmp_path / "in.extxyz"
    tiny = '1\nLattice="0.05 0 0 0 0.05 0 0 0 0.05" Properties=species:S:1:pos:R:3 pbc="T T T"\n'
    path.write_text(GOOD + tiny + "Cu 0 0 0\n")
    with pytest.raises(InvalidStructureError, match=r"line 5, structure 1: 1 atoms .* denser"):
        open_source(path).read()
    assert open_source(path, on_error="skip").read().n_structures == 1


def test_a_slab_or_wire_whose_lattice_is_in_the_wrong_units_is_refused(tmp_path):
    """Partly periodic cells escape the density limit (no volume): a 0.01 Å periodic
    translation along a slab's or a wire's periodic axes is refused, naming the line; a
    slab and a wire with real periods pass."""
    head = 'Lattice="{a} 0 0 0 {a} 0 0 0 20" Properties=species:S:1:pos:R:3 pbc="{pbc}"\n'
    for pbc in ("T T F", "T F F"):
        path = tmp_path / f"{pbc.replace(' ', '')}.extxyz"
        path.write_text(GOOD + "1\n" + head.format(a=0.01, pbc=pbc) + "Cu 0 0 0\n")
        with pytest.raises(InvalidStructureError, match=r"line 5, structure 1: a periodic "
                           r"translation of 0.01 .* own image"):  # fmt: skip
            open_source(path).read()
        assert open_source(path, on_error="skip").read().n_structures == 1
        path.write_text(GOOD + "1\n" + head.format(a=2.55, pbc=pbc) + "Cu 0 0 0\n")
        assert open_source(path).read().n_structures == 2


def test_a_comment_that_is_not_utf8_is_read_with_a_warning_naming_the_line(tmp_path, caplog):
    path = tmp_path / "in.extxyz"
    latin1 = '2\nProperties=species:S:1:pos:R:3 energy=-1.0 pbc="F F F" note="caf\xe9"\n'
    path.write_bytes(GOOD.encode() + latin1.encode("latin-1") + b"H 0 0 0\nH 0 0 0.7\n")
    with caplog.at_level(logging.WARNING):
        batch = open_source(path).read()
    assert batch.n_structures == 2
    assert "in.extxyz, line 6: not UTF-8 text (byte 0xe9)" in caplog.text


def test_an_n2p2_comment_that_is_not_utf8_is_named(tmp_path, caplog):
    path = tmp_path / "input.data"
    text = b"begin\ncomment caf\xe9\natom 0 0 0 H 0 0 0 0 0\nenergy -1\nend\n"
    path.write_bytes(text)
    with caplog.at_level(logging.WARNING):
        assert open_source(path, "n2p2").read().n_structures == 1
    assert "input.data, line 2: not UTF-8 text" in caplog.text
