"""Inputs at URLs (``memory://``; S3 in tests/workflow/test_featurize_object_store.py) and
gzipped: read structure for structure as the local file is read (the local reader is the
reference), with the byte-offset index on remote files and ranged reads per partition."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import ase.io
import fsspec
import numpy as np
import pytest

from dparallel.errors import InputFormatError, SourceNotFoundError
from dparallel.io import open_source
from dparallel.io.location import Location, LocationError, as_location, require_local_path
from dparallel.io.synthetic import random_structures


@pytest.fixture
def files(tmp_path):
    """The same structures as extxyz and n2p2 input.data, local."""
    from dparallel.n2p2 import write_input_data

    frames = random_structures(9, np.random.default_rng(3), min_atoms=2, max_atoms=7,
                               elements=(1, 8))  # fmt: skip
    for k, atoms in enumerate(frames):
        atoms.calc = None
        atoms.info["energy"] = -1.0 - k
    xyz = tmp_path / "data.xyz"
    ase.io.write(xyz, frames, format="extxyz")
    data = tmp_path / "input.data"
    write_input_data(data, frames, "ase")
    return xyz, data


def _upload(local, url: str, compress: bool = False) -> str:
    raw = local.read_bytes()
    fs = fsspec.filesystem("memory")
    fs.pipe_file(url.removeprefix("memory://"), gzip.compress(raw) if compress else raw)
    return url


def _same(a, b) -> None:
    assert len(a) == len(b)
    x, y = a.read(), b.read()
    np.testing.assert_array_equal(x.positions, y.positions)
    np.testing.assert_array_equal(x.numbers, y.numbers)
    np.testing.assert_array_equal(x.energy, y.energy)
    np.testing.assert_array_equal(x.forces, y.forces)
    np.testing.assert_array_equal(a.atom_counts, b.atom_counts)
    for start, stop in ((0, 3), (4, 9), (5, 6)):
        np.testing.assert_array_equal(a.read(start, stop).positions, b.read(start, stop).positions)


@pytest.mark.parametrize("kind", ["xyz", "n2p2"])
@pytest.mark.parametrize("compress", [False, True])
def test_a_url_reads_as_the_local_file(files, kind, compress, tmp_path, monkeypatch):
    monkeypatch.setenv("DPARALLEL_CACHE_DIR", str(tmp_path / "cache"))
    local = files[0] if kind == "xyz" else files[1]
    name = ("data.xyz" if kind == "xyz" else "input.data") + (".gz" if compress else "")
    url = _upload(local, f"memory://inputs/{tmp_path.name}/{name}", compress)
    remote = open_source(url)
    assert remote.format == ("extxyz" if kind == "xyz" else "n2p2")
    _same(open_source(local), remote)
    assert remote.fingerprint()["path"] == url
    assert remote.fingerprint()["index_sha256"] == open_source(local).fingerprint()["index_sha256"]
    # the index is cached in the cache dir, never beside the object
    assert list((tmp_path / "cache").glob("*.dpindex.npz"))
    assert not fsspec.filesystem("memory").exists(url.removeprefix("memory://") + ".dpindex.npz")


def test_a_local_gz_reads_as_the_plain_file(files, tmp_path):
    xyz = files[0]
    packed = tmp_path / "packed.xyz.gz"
    packed.write_bytes(gzip.compress(xyz.read_bytes()))
    _same(open_source(xyz), open_source(packed))


def test_a_partition_read_is_one_ranged_request(files, tmp_path, monkeypatch):
    url = _upload(files[0], f"memory://inputs/{tmp_path.name}/data.xyz")
    source = open_source(url)
    ranges = []
    original = Location.read_range

    def spy(self, start, stop):
        ranges.append((start, stop))
        return original(self, start, stop)

    monkeypatch.setattr(Location, "read_range", spy)
    source.read(2, 5)
    index = source.index
    assert ranges == [(int(index.starts[2]), int(index.ends[4]))]


def test_pickled_source_reads_remote_bytes(files, tmp_path):
    import pickle

    url = _upload(files[1], f"memory://inputs/{tmp_path.name}/input.data")
    source = open_source(url)
    again = pickle.loads(pickle.dumps(source))
    assert again.location == source.location
    np.testing.assert_array_equal(again.read(1, 4).positions, source.read(1, 4).positions)


def test_label_keys_travel_with_a_remote_source(tmp_path, monkeypatch):
    """Keys given read a URL as they read the local file, in a pickled copy too (a task's);
    reference: ASE's reading of the local file under those keys."""
    import pickle

    monkeypatch.setenv("DPARALLEL_CACHE_DIR", str(tmp_path / "cache"))
    frames = random_structures(5, np.random.default_rng(4), min_atoms=2, max_atoms=6,
                               elements=(1, 8))  # fmt: skip
    for k, atoms in enumerate(frames):
        atoms.calc = None
        atoms.info["dft_energy"] = -1.0 - k
        atoms.arrays["dft_forces"] = np.full((len(atoms), 3), 0.25 * k)
    local = tmp_path / "dft.xyz.gz"
    ase.io.write(local, frames, format="extxyz")
    url = _upload(local, f"memory://inputs/{tmp_path.name}/dft.xyz.gz")
    source = open_source(url, energy_key="dft_energy", forces_key="dft_forces")
    again = pickle.loads(pickle.dumps(source))
    for got in (source.read(), again.read(1, 5)):
        first = 5 - got.n_structures
        for k, atoms in enumerate(ase.io.read(local, f"{first}:")):
            assert got.energy[k] == atoms.info["dft_energy"]
            a, b = got.offsets[k : k + 2]
            np.testing.assert_array_equal(got.forces[a:b], atoms.arrays["dft_forces"])


def test_a_url_is_never_a_relative_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not as_location("s3://bucket/x.xyz").is_local
    assert as_location("s3://bucket/x.xyz").url == "s3://bucket/x.xyz"
    assert as_location("file:///abs/x.xyz").local.as_posix() == "/abs/x.xyz"
    assert as_location("rel/x.xyz").local == tmp_path / "rel" / "x.xyz"
    with pytest.raises(SourceNotFoundError, match=r"memory://nowhere/x\.xyz"):
        open_source("memory://nowhere/x.xyz")
    assert not (tmp_path / "memory:").exists() and not (tmp_path / "s3:").exists()
    with pytest.raises(LocationError, match="needs a local path, not a URL"):
        as_location("s3://bucket/x").require_local("this")


def test_file_urls_in_any_case_and_with_localhost_are_local_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for url in ("file:///abs/x.xyz", "FILE:///abs/x.xyz", "file://localhost/abs/x.xyz"):
        assert as_location(url).local.as_posix() == "/abs/x.xyz", url
        assert require_local_path(url, "this").as_posix() == "/abs/x.xyz", url
    assert require_local_path("file://~/x.xyz", "this") == Path("~/x.xyz").expanduser()  # as before
    assert require_local_path("rel/m", "this") == Path("rel/m")  # relative kept relative
    with pytest.raises(LocationError, match=r"^s3://b/m: the model directory needs a local"):
        require_local_path("s3://b/m", "the model directory")
    assert not any(tmp_path.iterdir())


def test_an_s3_url_is_normalised_or_refused_in_one_line():
    """obstore refuses keys with empty segments (``a//b``) in a Rust traceback; a URL with
    no bucket would name the bucket root of nothing."""
    assert as_location("s3://b/a//b.zarr").url == "s3://b/a/b.zarr"
    assert as_location("s3://b//x.zarr").url == "s3://b/x.zarr"
    assert as_location("s3://b/x/").url == "s3://b/x/"
    assert as_location("s3a://b/").url == "s3a://b"
    assert as_location("memory://a//b").url == "memory://a//b"  # fsspec's own paths kept
    for url in ("s3:///x.zarr", "s3://"):
        with pytest.raises(LocationError, match=r"names no bucket"):
            as_location(url)


def test_location_key_names_one_file_however_it_is_written(tmp_path, monkeypatch):
    from dparallel.io.location import location_key

    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "d")
    same = ["d/x.xyz", f"file://{tmp_path}/d/x.xyz", "link/x.xyz", "d/../d/x.xyz"]
    assert {location_key(p) for p in same} == {str((tmp_path / "d" / "x.xyz").resolve())}
    assert location_key("s3://b/a//x.data") == location_key("s3://b/a/x.data/") == "s3://b/a/x.data"
    assert location_key("s3://b/a/x.data") != location_key("s3://c/a/x.data")
    assert location_key("d/x.xyz") != location_key("d/y.xyz")


def test_an_unknown_scheme_is_one_line_naming_it():
    with pytest.raises(LocationError, match=r"^foo://bar/x: unknown URL scheme"):
        as_location("foo://bar/x").check_client()


def test_ase_formats_need_a_local_file(files, tmp_path):
    cif = tmp_path / "x.cif"
    ase.io.write(cif, ase.io.read(files[0], 0))
    url = _upload(cif, f"memory://inputs/{tmp_path.name}/x.cif")
    with pytest.raises((LocationError, InputFormatError), match="local"):
        open_source(url, format="cif")


def test_a_broken_file_at_a_url_is_indexed_as_the_local_one(tmp_path):
    """Counts too small and too large make the indexer seek back: the buffered remote
    stream lands on the same bytes, lines and errors as the local file."""
    from dparallel.io._index import load_or_build_index

    frame = "2\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 0 1\n"
    text = frame + frame.replace("H 0 0 1\n", "H 0 0 1\nH 0 0 2\n") + "3" + frame[1:] + frame
    local = tmp_path / "broken.xyz"
    local.write_text(text)
    url = _upload(local, f"memory://inputs/{tmp_path.name}/broken.xyz")
    a = load_or_build_index(as_location(local), "extxyz", cache=False)
    b = load_or_build_index(as_location(url), "extxyz", cache=False)
    for name in ("starts", "ends", "counts", "lines"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.errors == b.errors and len(a.errors) == 2


def test_a_read_only_home_caches_the_index_in_the_temporary_folder(files, tmp_path, monkeypatch):
    """No folder beside a URL and no writable cache folder (a read-only home): the index
    went nowhere ("could not cache the index … anywhere"), built again on every run."""
    from dparallel.io import _index

    url = _upload(files[0], f"memory://inputs/{tmp_path.name}/ro-home.xyz")
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("DPARALLEL_CACHE_DIR", str(blocked / "cache"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    counts = open_source(url).atom_counts.tolist()
    assert counts == open_source(files[0]).atom_counts.tolist()
    assert list((tmp_path / f"dparallel-{os.getuid()}").glob("*.dpindex.npz"))
    _index._KEPT.clear()  # a new process: only the file can answer
    monkeypatch.setattr(_index, "_build", None)  # building it again would fail
    assert (
        open_source(url).atom_counts.tolist()
        == counts
        == open_source(files[0]).atom_counts.tolist()
    )
