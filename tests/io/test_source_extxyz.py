"""extxyz / ASE-format sources: equality with ASE, random access, index cache, pickling."""

from __future__ import annotations

import os
import pickle

import ase.io
import numpy as np
import pytest

from dparallel.errors import InputError, InputFormatError, SourceNotFoundError
from dparallel.io import _index, _indexers, open_source
from dparallel.io.synthetic import random_structures
from dparallel.types import StructureBatch


@pytest.fixture
def small_xyz(tmp_path, rng):
    path = tmp_path / "small.xyz"
    frames = random_structures(40, rng)
    frames[3].info["set"] = "test"
    ase.io.write(path, frames, format="extxyz")
    return path


def test_extxyz_equals_ase(small_xyz):
    src = open_source(small_xyz)
    ref = StructureBatch.from_ase(ase.io.read(small_xyz, ":"))
    assert src.format == "extxyz" and len(src) == 40
    np.testing.assert_array_equal(src.atom_counts, ref.atom_counts)
    got = src.read(0, 40)
    assert got.equals(ref)
    assert got.tags[3] == "test"
    assert np.isfinite(got.energy).all() and np.isfinite(got.forces).all()
    assert got.pbc.any() and not got.pbc.all()


def test_ase_fallback_format_matches(tmp_path, rng):
    path = tmp_path / "frames.traj"
    frames = random_structures(12, rng)
    ase.io.write(path, frames)
    src = open_source(path)
    assert src.format == "traj"
    ref = StructureBatch.from_ase(ase.io.read(path, ":"))
    assert src.read(0, 12).equals(ref)
    assert src.read(4, 9).equals(ref.select(4, 9))


@pytest.mark.slow
def test_random_access_equals_sequential(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "big.extxyz"
    ase.io.write(path, random_structures(3000, rng, max_atoms=12), format="extxyz")
    src = open_source(path)
    assert len(src) == 3000
    whole = src.read(0, 3000)
    ref = StructureBatch.from_ase(ase.io.read(path, ":"))
    assert whole.equals(ref)
    for _ in range(25):
        a = int(rng.integers(0, 3000))
        b = int(rng.integers(a, min(3000, a + 200) + 1))
        assert src.read(a, b).equals(whole.select(a, b)), (a, b)
    # a fresh (pickled) source reading backwards gives the same structures
    other = pickle.loads(pickle.dumps(src))
    parts = [other.read(a, min(a + 500, 3000)) for a in range(2500, -1, -500)][::-1]
    assert StructureBatch.concatenate(parts).equals(whole)


def test_index_cache_used_and_invalidated(small_xyz, monkeypatch):
    src = open_source(small_xyz)
    cache = _index.cache_path_for(small_xyz.resolve(), "extxyz")[0]
    assert cache.is_file() and cache.name == f"{small_xyz.name}.dpindex.npz"

    def boom(*a, **k):
        raise AssertionError("index rebuilt although the cache is valid")

    monkeypatch.setitem(_indexers.STREAMED, "extxyz", boom)  # what _build calls
    monkeypatch.setattr(_index, "_KEPT", {})  # another process: from the cache file
    again = open_source(small_xyz)
    assert len(again) == len(src)
    assert again.fingerprint()["index_sha256"] == src.fingerprint()["index_sha256"]
    monkeypatch.undo()

    # appending a frame changes size and mtime: the index is rebuilt
    extra = ase.io.read(small_xyz, "0")
    ase.io.write(small_xyz, extra, format="extxyz", append=True)
    st = small_xyz.stat()
    os.utime(small_xyz, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    changed = open_source(small_xyz)
    assert len(changed) == len(src) + 1
    assert changed.fingerprint()["index_sha256"] != src.fingerprint()["index_sha256"]


def test_a_damaged_index_cache_is_rebuilt(small_xyz):
    src = open_source(small_xyz)
    cache = _index.cache_path_for(small_xyz.resolve(), "extxyz")[0]
    cache.write_bytes(cache.read_bytes()[:50])  # a cut zip: BadZipFile, not a traceback
    again = open_source(small_xyz)
    assert again.fingerprint()["index_sha256"] == src.fingerprint()["index_sha256"]


def test_an_atom_count_beyond_any_structure_is_one_line(tmp_path):
    path = tmp_path / "huge.xyz"
    path.write_text("1\n\nH 0 0 0\n99999999999999999999\n\nH 0 0 0\n")
    with pytest.raises(InputFormatError, match=r"line 4.*atom count 99999999999999999999 is"):
        open_source(path)


def test_index_cache_falls_back_to_user_dir(tmp_path, rng, monkeypatch):
    path = tmp_path / "a.xyz"
    ase.io.write(path, random_structures(3, rng), format="extxyz")
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")  # a file: no cache can be written under it, even as root
    real = _index.cache_path_for
    monkeypatch.setattr(_index, "cache_path_for", lambda p, f: [blocker / "x.npz", real(p, f)[1]])
    monkeypatch.setenv("DPARALLEL_CACHE_DIR", str(tmp_path / "cache"))
    assert len(open_source(path)) == 3
    assert len(list((tmp_path / "cache").glob("*.dpindex.npz"))) == 1


def test_pickled_source_refuses_changed_file(small_xyz, rng):
    src = open_source(small_xyz)
    blob = pickle.dumps(src)
    ase.io.write(small_xyz, random_structures(5, rng), format="extxyz")
    st = small_xyz.stat()
    os.utime(small_xyz, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    other = pickle.loads(blob)
    with pytest.raises(InputError, match="changed since it was opened"):
        len(other)


def test_missing_file(tmp_path):
    with pytest.raises(SourceNotFoundError, match=r"input file not found: .*nope.xyz"):
        open_source(tmp_path / "nope.xyz")


def test_read_range_checked(small_xyz):
    src = open_source(small_xyz)
    with pytest.raises(IndexError, match=r"\[5, 41\) outside \[0, 40\)"):
        src.read(5, 41)
    assert src.read(7, 7).n_structures == 0


def test_extxyz_variants_match_ase(tmp_path):
    """Comment-line variants the fast parser must read exactly as ASE does."""
    text = (
        '2\nLattice="4 0 0 0.5 5 0 0 0 6" Properties=species:S:1:pos:R:3:forces:R:3 '
        'energy=-1.25 pbc="T T F" set=test\n'
        "O 0.1 0.2 0.3 1 2 3\nH 1.5e-1 -2 3.25 -1 -2 -3\n"
        "1\nProperties=species:S:1:pos:R:3:charge:R:1:REF_forces:R:3 REF_energy=7.5\n"
        "Cu 1 2 3 0.5 0.1 0.2 0.3\n"
        "3\nplain xyz comment\nC 0 0 0\nH 0 0 1.09\nH 1.0 0 0\n"
        '1\nLattice="3 0 0 0 3 0 0 0 3" Properties=species:S:1:pos:R:3:tags:I:1\n'
        "Si 0 0 0 7\n"
        "3\nenergy=-2.0 symbols in any case, as some codes write them and ASE reads them\n"
        "NA 0 0 0\ncl 0 0 2.4\no 0 2 0\n"
        "2\nProperties=species:S:1:pos:R:3:Z:I:1 energy=-3.0\nO 0 0 0 8\nH 0 0 1 1\n"
    )
    path = tmp_path / "variants.xyz"
    path.write_text(text)
    got = open_source(path).read()
    ref = StructureBatch.from_ase(ase.io.read(path, ":"))
    assert got.equals(ref)
    assert list(got.tags) == ["test", "", "", "", "", ""]
    np.testing.assert_array_equal(got.pbc[:4], [[1, 1, 0], [0, 0, 0], [0, 0, 0], [1, 1, 1]])
    np.testing.assert_array_equal(got.energy[:2], [-1.25, 7.5])
    assert np.isnan(got.energy[2:4]).all() and np.isnan(got.forces[3:]).all()
    np.testing.assert_array_equal(got.numbers[-5:], [11, 17, 8, 8, 1])


def test_species_and_z_columns_that_disagree_are_an_error(tmp_path):
    """ASE takes the Z column and drops the species; which one is wrong cannot be told, so
    the frame is refused, naming the line."""
    path = tmp_path / "sz.xyz"
    path.write_text(
        "2\nProperties=species:S:1:pos:R:3:Z:I:1\nO 0 0 0 8\nH 0 0 1 1\n"
        "2\nProperties=species:S:1:pos:R:3:Z:I:1\nO 0 0 0 8\nH 0 0 1 3\n"
    )
    with pytest.raises(InputFormatError, match=r"line 8, structure 1: species 'H' and Z 3"):
        open_source(path).read()
    assert open_source(path, on_error="skip").read().n_structures == 1


def test_extra_column_is_an_error(tmp_path):
    """ASE silently ignores a surplus column; dparallel reports it."""
    path = tmp_path / "extra.xyz"
    path.write_text("2\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 0 1 9\n")
    with pytest.raises(InputFormatError, match=r"line 4, structure 0: wrong column count"):
        open_source(path).read()


@pytest.mark.parametrize(
    ("properties", "atom"),
    [
        ("id:I:1:species:S:1:pos:R:3:forces:R:3", "{k} Cu {x} 0.5 0.0 0.1 0.2 0.3"),
        ("pos:R:3:species:S:1:forces:R:3", "{x} 1 0 Cu 0.1 0.2 0.3"),  # integer coordinates
        ('"id:I:1:species:S:1:pos:R:3"', "{k} Cu {x} 0.5 0.0"),
    ],
)
def test_a_number_in_an_atom_lines_first_column_is_no_count_line(tmp_path, properties, atom):
    """An ``id`` column (OVITO, LAMMPS-made files) or integer positions first: such atom
    lines were taken for the next frame's count line, and the file refused or, under
    --on-error skip, cut into bogus frames that were all skipped."""
    frames = []
    for n in (3, 2):
        comment = f'Lattice="6 0 0 0 6 0 0 0 6" Properties={properties} energy=-{n}.5 pbc="T T T"'
        lines = [atom.format(k=k + 1, x=2 * k) for k in range(n)]
        frames.append("\n".join([str(n), comment, *lines]))
    path = tmp_path / "ids.xyz"
    path.write_text("\n".join(frames) + "\n")
    batch = open_source(path).read()
    reference = ase.io.read(path, ":")
    assert batch.n_structures == len(reference) == 2
    np.testing.assert_array_equal(batch.energy, [a.get_potential_energy() for a in reference])
    np.testing.assert_array_equal(batch.positions, np.concatenate([a.positions for a in reference]))
    np.testing.assert_array_equal(batch.numbers, np.concatenate([a.numbers for a in reference]))
    if "forces" in properties:
        forces = np.concatenate([a.get_forces() for a in reference])
        np.testing.assert_array_equal(batch.forces, forces)


@pytest.mark.parametrize(
    "comment",
    [
        'Properties=species:S:1:pos:R:3 energy=-7 pbc="F F F"',  # an int energy
        'Properties=species:S:1:pos:R:3 energy=1e-3 pbc="T, F, T" Lattice="5 0 0 0 5 0 0 0 5"',
        "Properties=species:S:1:pos:R:3 REF_energy=.5 config_type=bulk tag=x step=3",
        'Lattice="5.0 0 0 0 6.0 0 0 0 7.0" Properties="species:S:1:pos:R:3" energy=-1.5 pbc=T',
        "energy=-2.5 set=valid is_relaxed name='two words'",  # ASE's own reader (' quotes)
        'energy=-2.5 Lattice="5 0 0 0 5 0 0 0 5" pbc="T T T" uid=42',
        "energy=nan set=7",
    ],
)
def test_comment_line_variants_read_as_ase(tmp_path, comment):
    """The fast comment-line reader (io/_comment.py) against ASE, through the parser."""
    path = tmp_path / "v.xyz"
    path.write_text(f"2\n{comment}\nO 0 0 0\nH 0 0 0.97\n" * 2)
    got = open_source(path).read()
    ref = StructureBatch.from_ase(ase.io.read(path, ":"))
    assert got.equals(ref)
    assert list(got.tags) == list(ref.tags)


@pytest.mark.parametrize("column", ["forces:I:3", "REF_forces:I:3"])
def test_a_forces_column_of_integers_is_read_as_ase_reads_it(tmp_path, column):
    """A forces column typed I (integer forces, as a hand-made or converted file may have):
    the fast parser took only R columns, and stored such forces as absent (NaN) where ASE
    reads them."""
    path = tmp_path / "intforces.xyz"
    path.write_text(
        f"2\nProperties=species:S:1:pos:R:3:{column} energy=-1.5\nO 0 0 0 1 2 3\nH 0 0 1 -1 0 2\n"
    )
    got = open_source(path).read()
    reference = ase.io.read(path)
    name = column.split(":")[0]
    expected = reference.get_forces() if name == "forces" else reference.arrays[name]
    np.testing.assert_array_equal(got.forces, expected)
    np.testing.assert_array_equal(got.forces, [[1, 2, 3], [-1, 0, 2]])


@pytest.mark.parametrize("suffix", ["gz", "bz2", "xz"])
def test_a_compressed_file_reads_as_ase_reads_it(tmp_path, rng, suffix):
    """.gz, .bz2 and .xz (which ASE reads too) are decompressed whole; the index's byte
    ranges are the text's, so reading structure k alone equals reading them all."""
    import bz2
    import gzip
    import lzma

    pack = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[suffix]
    plain = tmp_path / "frames.xyz"
    ase.io.write(plain, random_structures(15, rng, max_atoms=6), format="extxyz")
    path = tmp_path / f"frames.xyz.{suffix}"
    path.write_bytes(pack(plain.read_bytes()))
    source = open_source(path)
    assert source.format == "extxyz" and len(source) == 15
    reference = StructureBatch.from_ase(ase.io.read(path, ":"))  # ASE decompresses it itself
    assert source.read().equals(reference)
    for k in (0, 7, 14):
        assert source.read(k, k + 1).equals(reference.select(k, k + 1))
    path.write_bytes(pack(plain.read_bytes())[:-30])  # cut short
    with pytest.raises(InputFormatError, match=r"not a readable .* file"):
        open_source(path, cache_index=False)
