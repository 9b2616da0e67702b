"""The fast extxyz comment-line reader gives exactly ASE's dict (keys, order, value types)."""

from __future__ import annotations

import io
import itertools

import ase.io
import numpy as np
import pytest
from ase.io.extxyz import key_val_str_to_dict

from dparallel.io._comment import comment_info
from dparallel.io.synthetic import random_structures


def _same(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray)
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        )
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (float, np.floating)) and np.isnan(a):
        return bool(np.isnan(b))  # type: ignore[arg-type]
    return a == b


def _check(line: str) -> None:
    try:
        expected = key_val_str_to_dict(line.strip())
    except Exception as exc:  # noqa: BLE001 - the fast reader must raise the same
        with pytest.raises(type(exc)):
            comment_info(line)
        return
    got = comment_info(line)
    assert list(got) == list(expected), line
    for key in expected:
        assert _same(got[key], expected[key]), (line, key, got[key], expected[key])


_PIECES = [
    "energy=-14.94591544",
    "energy=-1",
    "energy=+3",
    "energy=007",
    "energy=1e5",
    "energy=1E-5",
    "energy=.5",
    "energy=5.",
    "energy=-0.0",
    "energy=nan",
    "energy=inf",
    "energy=-Infinity",
    "energy=1_000",
    "energy=0x10",
    "energy=T",
    "energy=foo",
    "energy=1e400",
    "energy=123456789012345678",
    "energy=1234567890123456789",
    "energy=12345678901234567890",
    "energy=1,2",
    "energy=1,2,3",
    "REF_energy=-3.25",
    "free_energy=-3.25",
    "Properties=species:S:1:pos:R:3:forces:R:3",
    'Properties="species:S:1:pos:R:3"',
    "Properties=species:S:1:pos:R:3:Z:I:1",
    'pbc="T T T"',
    'pbc="F F F"',
    'pbc="T F T"',
    "pbc=T",
    'pbc="true false TRUE"',
    'pbc="T, T, T"',
    'Lattice="6.0 0.0 0.0 0.0 6.0 0.0 0.0 0.0 6.0"',
    'Lattice="1 0 0 0 1 0 0 0 1"',
    'Lattice="1 2 3"',
    "Lattice=5",
    'lattice="1 2 3"',
    'stress="1 2 3 4 5 6 7 8 9"',
    'virial="1.0 2 3 4 5 6 7 8 9e0"',
    "set=train",
    "tag=water_1",
    "config_type=bulk",
    "uid=123",
    "UID=456",
    "is_ok",
    "flag=F",
    "flag=False",
    "flag=t",
    'name="two words"',
    'name="x=1"',
    "name=\"{a}[b]'c'\"",
    'name="_JSON [1, 2, 3]"',
    'name="_JSON {\\"a\\": 1}"',
    'name="_JSON ["a", "b"]"',
    "name=_JSON",
    "a=b=c",
    "a =b",
    "a= b",
    'a="x"y',
    'a"b"=1',
    "a=",
    'a=""',
    "a=[1,2,3]",
    "a={1 2}",
    "a='1 2 3'",
    r"a=b\ c",
    "=1",
    "time=0.5fs",
    "step=10",
    "numbers=1 2 3",
    "Time=1.2e-3",
    "σ=1.0",
    "énergie=-2",
    'a="1 2 3"',
    'a="1.5 2"',
    'a="T 1"',
    'a="nan 1"',
    'a="1, 2.5e3,-4"',
    'a="12345678901234567890 1"',
    'a="x:y"',
    'a="x:y z"',
    "a=1:2",
    "a=x/y",
    "a=١٢",
    'Lattice="1 2 3 4 5 6 7 8 9.5"',
    'Lattice="T T T T T T T T T"',
    'stress="a:b"',
    "Properties=a:b",
]


@pytest.mark.parametrize("piece", _PIECES)
def test_each_piece_alone_and_with_the_usual_keys(piece: str) -> None:
    _check(piece)
    _check(f"  {piece}  ")
    _check(f'Properties=species:S:1:pos:R:3 {piece} pbc="F F F"')
    _check(f'{piece}\tLattice="6 0 0 0 6 0 0 0 6"  energy=-1.5 {piece}')


def test_many_combinations_match_ase() -> None:
    rng = np.random.default_rng(7)
    for _ in range(3000):
        k = int(rng.integers(1, 7))
        pieces = [_PIECES[int(i)] for i in rng.integers(0, len(_PIECES), k)]
        sep = [" ", "  ", "\t", " \t "][int(rng.integers(0, 4))]
        _check(sep.join(pieces))


def test_random_numbers_read_as_numpy_reads_them() -> None:
    rng = np.random.default_rng(3)
    for value in itertools.chain(
        rng.normal(scale=1e3, size=500),
        rng.lognormal(sigma=30, size=200) * rng.choice([-1, 1], 200),
    ):
        for text in (repr(float(value)), f"{value:.8f}", f"{value:.6e}", f"{value:g}"):
            _check(f'energy={text} pbc="T T T"')
    for value in rng.integers(-(2**62), 2**62, 200):
        _check(f"step={int(value)}")


def test_lines_ase_writes_match(rng) -> None:
    frames = random_structures(30, rng, max_atoms=4)
    for k, atoms in enumerate(frames):
        atoms.info.update({"config_type": f"c{k}", "step": k, "weight": 0.5 * k, "ok": k % 2 == 0})
    buffer = io.StringIO()
    ase.io.write(buffer, frames, format="extxyz")
    lines = buffer.getvalue().splitlines()
    comments = [lines[i + 1] for i in range(len(lines)) if lines[i].strip().isdigit()]
    assert len(comments) == len(frames)
    for line in comments:
        _check(line)


def test_a_blank_line_is_empty() -> None:
    assert comment_info("") == {} == comment_info("   \t ")


def test_the_usual_line_does_not_go_through_ase(monkeypatch: pytest.MonkeyPatch) -> None:
    import ase.io.extxyz

    def refuse(*args, **kwargs):
        raise AssertionError("ASE's reader was called")

    monkeypatch.setattr(ase.io.extxyz, "key_val_str_to_dict", refuse)
    line = (
        'Lattice="6.0 0.0 0.0 0.0 6.0 0.0 0.0 0.0 6.0" Properties=species:S:1:pos:R:3:forces:R:3 '
        'energy=-14.94591544 pbc="T T T" config_type=bulk'
    )
    info = comment_info(line)
    assert info["energy"] == -14.94591544 and info["pbc"] == [True, True, True]
    with pytest.raises(AssertionError, match="ASE's reader"):
        comment_info("a='1 2'")  # quoted by ' : ASE's own reader


def test_values_every_frame_repeats_are_converted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # the Lattice and pbc most frames of a file share were converted anew on every comment
    # line, 8 of its ~17 us; now once, each line still getting ASE's values, its own copies
    from dparallel.io import _comment

    converted: list[str] = []
    real = _comment._value
    monkeypatch.setattr(
        _comment, "_value", lambda key, value: converted.append(key) or real(key, value)
    )
    lattice = '"7.125 0 0 0 7.25 0 0 0 7.375"'  # no other test's: not converted before
    lines = [f'Lattice={lattice} energy={-e / 7:.6f} pbc="T T F"' for e in range(300)]
    for line in lines:
        info = comment_info(line)
        expected = key_val_str_to_dict(line)  # ASE's reading, every time
        assert list(info) == list(expected) and all(_same(info[k], expected[k]) for k in info)
        info["Lattice"][0, 0] = -1.0  # a caller changing its own dict changes no other
        info["pbc"][0] = False
    assert converted.count("Lattice") == 1 and converted.count("pbc") <= 1
    assert converted.count("energy") == len(lines)
    nested = 'a="_JSON [[true], [null]]"'  # a value whose list holds lists: copied whole
    comment_info(nested)["a"][0].append(5)
    assert comment_info(nested)["a"] == key_val_str_to_dict(nested)["a"] == [[True], [None]]
