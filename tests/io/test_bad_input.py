"""Malformed input: each case names the file, the line or structure, and what is wrong."""

from __future__ import annotations

import re

import pytest

from dparallel.errors import InputFormatError, InvalidStructureError
from dparallel.io import open_source

GOOD_XYZ = """2
Properties=species:S:1:pos:R:3 energy=-1.5 pbc="F F F"
H 0.0 0.0 0.0
H 0.0 0.0 0.74
"""


def _xyz(bad_frame: str) -> str:
    return GOOD_XYZ + bad_frame + GOOD_XYZ


# (name, text, error class, line, structure, reason regex)
XYZ_CASES = [
    (
        "truncated",
        GOOD_XYZ + "3\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 0 1\n",
        InputFormatError,
        5,
        1,
        r"truncated frame: expected 3 atom lines, file ends after 2",
    ),
    (
        "columns",
        _xyz("2\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 0\n"),
        InputFormatError,
        8,
        1,
        r"wrong column count: expected 4 columns \(species:S:1:pos:R:3\), found 3",
    ),
    (
        "non_numeric",
        _xyz("2\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 abc 1\n"),
        InputFormatError,
        8,
        1,
        r"non-numeric field 'abc' in column 3 \(pos\)",
    ),
    (  # n2p2 (atof) would read 1.0 here, silently
        "fortran_exponent",
        _xyz("2\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 0 1.0D-03\n"),
        InputFormatError,
        8,
        1,
        r"non-numeric field '1.0D-03' in column 4 \(pos\) \(a Fortran exponent: write 1.0E-03\)",
    ),
    (
        "unknown_element",
        _xyz("2\nProperties=species:S:1:pos:R:3\nH 0 0 0\nXq 0 0 1\n"),
        InputFormatError,
        8,
        1,
        r"unknown element 'Xq'",
    ),
    (
        "nan_coordinates",
        _xyz("2\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 nan 1\n"),
        InvalidStructureError,
        8,  # the atom's line
        1,
        r"atom 1: non-finite coordinates",
    ),
    (
        "singular_cell",
        _xyz(
            '2\nLattice="1 0 0 2 0 0 0 0 1" Properties=species:S:1:pos:R:3 pbc="T T T"\n'
            "H 0 0 0\nH 0 0 0.7\n"
        ),
        InvalidStructureError,
        5,
        1,
        r"periodic structure \(pbc=\[True, True, True\]\) has a singular cell",
    ),
    (  # ASE reads it as periodic with a zero cell, which no neighbor list can take
        "pbc_without_lattice",
        _xyz('2\nProperties=species:S:1:pos:R:3 pbc="T T T"\nH 0 0 0\nH 0 0 0.7\n'),
        InvalidStructureError,
        5,
        1,
        r"periodic structure \(pbc=\[True, True, True\]\) has no cell \(all zero: an extxyz "
        r"frame without Lattice\?\): give its Lattice, or pbc=\"F F F\"",
    ),
    *(  # GPUMD reads these keys in any case, ASE only as written: a bulk cell read as
        # no cell (a molecule, silently), a force column dropped
        (
            f"miscased_{key}",
            _xyz(f"2\n{comment} energy=-1\nH 0 0 0 {extra}\nH 0 0 0.7 {extra}\n"),
            InputFormatError,
            6,
            1,
            rf"{key}= is not read: ASE and dparallel read {right}= only, in this case; rename it",
        )
        for key, right, comment, extra in (
            ("lattice", "Lattice", 'lattice="5 0 0 0 5 0 0 0 5"', ""),
            ("PROPERTIES", "Properties", "PROPERTIES=species:S:1:pos:R:3:force:R:3", "1 2 3"),
        )
    ),
    ("empty", "", InputFormatError, None, None, r"empty file: no structures found"),
    (
        "count_too_small",
        _xyz("2\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 0 1\nH 0 0 2\n"),
        InputFormatError,
        5,
        1,
        r"atom count 2 on line 5 is too small: line 9 holds another atom line \('H 0 0 2'\)",
    ),
    (
        "count_too_large",
        _xyz("3\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 0 1\n"),
        InputFormatError,
        5,
        1,
        r"atom count 3 on line 5 is too large: line 9 starts the next frame after 2 atom lines",
    ),
    (  # the next count line with words after it, its comment with a Lattice of numbers
        "count_too_large_then_worded_count",
        GOOD_XYZ
        + "3\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 0 1\n"
        + GOOD_XYZ.replace("2\n", "2 atoms\n", 1).replace(
            "Properties", 'Lattice="6 0 0 0 6 0 0 0 6" Properties', 1
        ),
        InputFormatError,
        5,
        1,
        r"atom count 3 on line 5 is too large: line 9 starts the next frame after 2 atom lines",
    ),
    (  # ASE refuses the comment line: named, not the count line above it
        "bad_lattice",
        _xyz('2\nLattice="6 0 0 0 6 0 x 0 6" Properties=species:S:1:pos:R:3\nH 0 0 0\nH 0 0 1\n'),
        InputFormatError,
        6,
        1,
        r"cannot parse frame: .*Lattice",
    ),
    (  # a forces column of text holds no forces (it was stored as absent, silently)
        "text_forces",
        _xyz("2\nProperties=species:S:1:pos:R:3:REF_forces:S:3\nH 0 0 0 a b c\nH 0 0 1 a b c\n"),
        InputFormatError,
        6,
        1,
        r"cannot read its energy or forces as numbers",
    ),
    (
        "bad_count_line",
        GOOD_XYZ + "two\ncomment\n",
        InputFormatError,
        5,
        1,
        r"expected the number of atoms of a new frame, found b'two",
    ),
    *(
        (
            f"energy_{name}",
            _xyz(
                f'2\nProperties=species:S:1:pos:R:3 energy={value} pbc="F F F"\nH 0 0 0\nH 0 0 1\n'
            ),
            InputFormatError,
            6,
            1,
            rf"energy={shown} is not a number"
            + (r" \(a Fortran exponent: write -1.5E\+03\)" if name == "fortran" else ""),
        )  # ASE kept these as a string, a list or True (stored as NaN or 1.0, silently)
        for name, value, shown in (
            ("word", "abc", "'abc'"),
            ("comma", "1,5", r"array\(\[1, 5\]\)"),
            ("bool", "T", "True"),
            ("unit", '"-3.2 eV"', "'-3.2 eV'"),
            ("fortran", "-1.5D+03", r"'-1.5D\+03'"),
        )
    ),
]

GOOD_N2P2 = """begin
comment ok
atom 0.0 0.0 0.0 H 0.0 0.0 0.0 0.0 0.0
atom 0.0 0.0 0.74 H 0.0 0.0 0.0 0.0 0.0
energy -1.0
charge 0.0
end
"""


def _n2p2(body: str) -> str:
    return GOOD_N2P2 + "begin\ncomment bad\n" + body + "energy -1.0\ncharge 0.0\nend\n" + GOOD_N2P2


N2P2_CASES = [
    (
        "columns",
        _n2p2("atom 0 0 0 H 0 0 0 0\n"),
        InputFormatError,
        10,
        1,
        r"wrong column count: expected 10 \(atom x y z element charge n fx fy fz\), found 9",
    ),
    (
        "non_numeric",
        _n2p2("atom 0 0 1.2.3 H 0 0 0 0 0\n"),
        InputFormatError,
        10,
        1,
        r"non-numeric field '1.2.3'",
    ),
    (
        "fortran_exponent",
        _n2p2("atom 0 0 7.5d+1 H 0 0 0 0 0\n"),
        InputFormatError,
        10,
        1,
        r"non-numeric field '7.5d\+1' \(a Fortran exponent: write 7.5e\+1\)",
    ),
    (
        "unknown_element",
        _n2p2("atom 0 0 0 Qq 0 0 0 0 0\n"),
        InputFormatError,
        10,
        1,
        r"unknown element 'Qq'",
    ),
    (
        "nan",
        _n2p2("atom 0 0 inf H 0 0 0 0 0\n"),
        InvalidStructureError,
        10,  # the atom's line
        1,
        r"atom 0: non-finite coordinates \[0.0, 0.0, inf\]",
    ),
    (
        "singular_cell",
        _n2p2("lattice 1 0 0\nlattice 0 1 0\nlattice 2 2 0\natom 0 0 0 H 0 0 0 0 0\n"),
        InvalidStructureError,
        8,
        1,
        r"has a singular cell",
    ),
    (
        "begin_without_end",
        GOOD_N2P2 + "begin\ncomment x\natom 0 0 0 H 0 0 0 0 0\n" + GOOD_N2P2,
        InputFormatError,
        8,
        1,
        r"'begin' without 'end' \(next 'begin' at line 11\)",
    ),
    (
        "begin_without_end_at_eof",
        GOOD_N2P2 + "begin\ncomment x\natom 0 0 0 H 0 0 0 0 0\n",
        InputFormatError,
        8,
        1,
        r"'begin' without 'end' \(file ends first\)",
    ),
    ("empty", "\n\n", InputFormatError, None, None, r"empty file: no structures found"),
    ("no_atoms", _n2p2(""), InvalidStructureError, 8, 1, r"structure has no atoms"),
    (
        "wrong_lattice",
        _n2p2("lattice 1 0 0\natom 0 0 0 H 0 0 0 0 0\n"),
        InputFormatError,
        8,
        1,
        r"expected 0 or 3 'lattice' lines, found 1",
    ),
]


def _check(path, fmt, cls, line, frame, reason):
    with pytest.raises(cls) as info:
        open_source(path, fmt).read()
    msg = str(info.value)
    assert type(info.value) is cls, msg
    assert msg.startswith(str(path.resolve())), msg
    if line is not None:
        assert f"line {line}" in msg, msg
        assert info.value.line == line
    if frame is not None:
        assert f"structure {frame}" in msg, msg
    assert re.search(reason, msg), msg


@pytest.mark.parametrize(("name", "text", "cls", "line", "frame", "reason"), XYZ_CASES)
def test_bad_extxyz(tmp_path, name, text, cls, line, frame, reason):
    path = tmp_path / f"{name}.xyz"
    path.write_text(text)
    _check(path, None, cls, line, frame, reason)


@pytest.mark.parametrize(("name", "text", "cls", "line", "frame", "reason"), N2P2_CASES)
def test_bad_n2p2(tmp_path, name, text, cls, line, frame, reason):
    path = tmp_path / f"{name}.data"
    path.write_text(text)
    _check(path, "n2p2", cls, line, frame, reason)


def test_end_without_begin(tmp_path):
    path = tmp_path / "input.data"
    path.write_text(GOOD_N2P2 + "end\n")
    with pytest.raises(InputFormatError, match=r"input.data, line 8: 'end' without 'begin'"):
        open_source(path)


@pytest.mark.parametrize("case", [c for c in XYZ_CASES if c[0] not in ("empty", "bad_count_line")])
def test_skip_keeps_valid_extxyz(tmp_path, case):
    name, text, _, _, frame, reason = case
    path = tmp_path / f"{name}.xyz"
    path.write_text(text)
    src = open_source(path, on_error="skip")
    res = src.read_checked(0, len(src))
    n_good = len(src) - 1
    assert res.batch.n_structures == n_good
    assert [i for i, _ in res.skipped] == [frame]
    assert re.search(reason, res.skipped[0][1])
    assert src.skipped == res.skipped
    assert list(res.indices) == [i for i in range(len(src)) if i != frame]
    assert (res.batch.positions[:, 2].reshape(-1, 2)[:, 1] == 0.74).all()


@pytest.mark.parametrize("case", [c for c in N2P2_CASES if c[0] != "empty"])
def test_skip_keeps_valid_n2p2(tmp_path, case):
    name, text, _, _, frame, reason = case
    path = tmp_path / f"{name}.data"
    path.write_text(text)
    src = open_source(path, "n2p2", on_error="skip")
    res = src.read_checked()
    assert res.batch.n_structures == len(src) - 1
    assert [i for i, _ in res.skipped] == [frame]
    assert re.search(reason, res.skipped[0][1])
    assert list(res.indices) == [i for i in range(len(src)) if i != frame]
    assert (res.batch.energy == -1.0).all()


def test_n2p2_non_numeric_charge_column(tmp_path):
    path = tmp_path / "input.data"
    path.write_text(_n2p2("atom 0 0 0 H 0 0 0 0 0\natom 0 0 1 H q 0 0 0 0\n"))
    with pytest.raises(InputFormatError, match=r"line 11, structure 1: non-numeric field 'q'"):
        open_source(path).read()


def test_a_folder_or_a_device_is_not_a_missing_file(tmp_path):
    """``evaluate MODEL store.zarr`` and ``/dev/null`` said "input file not found"."""
    from dparallel.errors import InputError, SourceNotFoundError

    store = tmp_path / "feats.zarr"
    store.mkdir()
    (store / "zarr.json").write_text("{}")
    with pytest.raises(InputError, match=r"feats.zarr is a folder, not a structure file \(a zarr"):
        open_source(store)
    with pytest.raises(InputError, match="/dev/null is not a regular file"):
        open_source("/dev/null")
    with pytest.raises(SourceNotFoundError, match="input file not found"):
        open_source(tmp_path / "missing.xyz")


def test_a_file_of_no_known_format_is_said_with_the_way_out(tmp_path):
    """ASE's last guess is the bare suffix, which no reader has: the message says to pass
    --format, not "ASE cannot read it as 'foo'"; a LAMMPS data file named *.data (read as
    n2p2 by its name) points to --format too."""
    notes = tmp_path / "notes.foo"
    notes.write_text("hello\nworld\n")
    with pytest.raises(InputFormatError, match=r"ASE has no format 'foo'\); pass format= / --"):
        open_source(notes)
    lammps = tmp_path / "cu.data"
    lammps.write_text("(written by ASE)\n\n2 atoms\n1 atom types\n")
    with pytest.raises(InputFormatError, match=r"line 1: .* --format, e.g. lammps-data\)$"):
        open_source(lammps)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("fmt", ["extxyz", "n2p2"])
def test_a_bad_atom_is_named_by_its_own_line(tmp_path, fmt, gz):
    """A non-finite coordinate or force names the line that holds it (counted here from
    the text), past a structure's comment and lattice lines, gzipped too."""
    import gzip

    if fmt == "extxyz":
        frame = (
            '3\nLattice="5 0 0 0 5 0 0 0 5" Properties=species:S:1:pos:R:3:forces:R:3 '
            'energy=-1 pbc="T T T"\n' + "".join(f"H 0 0 {z} 0 0 0\n" for z in (0, 1, 2))
        )
    else:
        frame = (
            "begin\ncomment c\n"
            + "".join(
                f"lattice {' '.join('5' if i == j else '0' for j in range(3))}\n" for i in range(3)
            )
            + "".join(f"atom 0 0 {z} H 0 0 0 0 0\n" for z in (0, 1, 2))
            + "energy -1\ncharge 0\nend\n"
        )
    lines = (frame * 3).splitlines(keepends=True)
    per_frame = len(frame.splitlines())
    atom_rows = [k for k, row in enumerate(frame.splitlines()) if row.startswith(("H", "atom"))]
    for target, col, what in ((atom_rows[2], 3, "coordinates"), (atom_rows[1], -2, "forces")):
        row = per_frame + target  # structure 1's atom
        fields = lines[row].split()
        fields[col] = "nan"
        bad = [*lines[:row], " ".join(fields) + "\n", *lines[row + 1 :]]
        path = tmp_path / f"{what}.{'xyz' if fmt == 'extxyz' else 'data'}{'.gz' if gz else ''}"
        data = "".join(bad).encode()
        path.write_bytes(gzip.compress(data) if gz else data)
        with pytest.raises(InvalidStructureError, match=f"structure 1: atom .*{what}") as info:
            open_source(path, fmt).read()
        assert info.value.line == row + 1, str(info.value)
        assert "nan" in data.decode().splitlines()[info.value.line - 1]


@pytest.mark.parametrize("given", ["extxzy", "foo"])
def test_a_format_no_reader_has_is_refused_by_name(tmp_path, given):
    # --format extxzy: "ASE cannot read it as 'extxzy': extxzy", after an indexing attempt
    path = tmp_path / "a.xyz"
    path.write_text("1\n\nH 0 0 0\n")
    with pytest.raises(InputFormatError) as refused:
        open_source(path, format=given)
    assert str(refused.value) == (
        f"{path}: unknown format {given!r}: expected extxyz (alias xyz), n2p2 (alias runner) "
        "or an ASE format such as lammps-data, vasp, traj"
    )
    assert len(open_source(path, format="XYZ")) == 1  # names in any case, aliases, ASE's
    assert open_source(path, format="xyz").format == "extxyz"


def test_known_format_is_the_one_rule_for_sources_and_workflows():
    from dparallel.io import known_format
    from dparallel.workflow.spec import DatasetSpec

    for name in ("extxyz", "XYZ", "n2p2", "runner", "lammps-data", "vasp", "traj"):
        assert known_format(name), name
        assert DatasetSpec(path="d", format=name).format == name
    for name in ("extxzy", "foo", "data"):
        assert not known_format(name), name


@pytest.mark.parametrize("fmt", ["extxyz", "n2p2"])
def test_a_byte_order_mark_is_read_past(tmp_path, fmt):
    """A UTF-8 byte-order mark (Windows editors write one, often with CRLF line ends) before
    the first count line or ``begin``: the file was refused as having no atom count (or
    text outside a block); it reads as the file without it."""
    text = (GOOD_XYZ if fmt == "extxyz" else GOOD_N2P2) * 2
    plain, marked = tmp_path / "plain", tmp_path / "marked"
    plain.mkdir(), marked.mkdir()
    name = "a.xyz" if fmt == "extxyz" else "input.data"
    (plain / name).write_bytes(text.replace("\n", "\r\n").encode())
    (marked / name).write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    expected = open_source(plain / name).read()
    got = open_source(marked / name)
    assert got.read().equals(expected)
    assert got.read(1, 2).equals(expected.select(1, 2))
    assert list(got.index.lines) == list(open_source(plain / name).index.lines)
    (marked / name).rename(marked / "frames")  # told by its first line, past the mark
    assert open_source(marked / "frames").format == fmt


@pytest.mark.parametrize("fmt", ["extxyz", "n2p2"])
def test_lines_that_end_in_cr_only_are_said_as_such(tmp_path, fmt):
    """Classic Mac OS line ends (CR, no LF) made the whole file one line: it was refused as
    a 'truncated frame' or a 'begin' without 'end'."""
    text = (GOOD_XYZ if fmt == "extxyz" else GOOD_N2P2) * 2
    path = tmp_path / ("a.xyz" if fmt == "extxyz" else "input.data")
    path.write_bytes(text.replace("\n", "\r").encode())
    with pytest.raises(InputFormatError, match=r"line 1: its lines end in CR only .* tr '\\r'"):
        open_source(path)
