"""What a location at ``s3://`` does through obstore (dparallel.io._s3_objects), checked
against moto's server through s3fs, a client independent of dparallel's."""

from __future__ import annotations

import gzip
import io
import time

import pytest
from s3server import filesystem, point_at_nothing, s3_server

from dparallel.io._index import open_stream
from dparallel.io.location import READ_BLOCK, LocationError, as_location

pytest.importorskip("obstore")


@pytest.fixture(scope="module")
def s3():
    with s3_server(("dparallel-test",)) as endpoint:
        yield endpoint


@pytest.fixture
def base(s3, request) -> str:
    return f"s3://dparallel-test/{request.node.name}-{time.monotonic_ns()}"


def _put(url: str, data: bytes) -> None:
    fs, path = filesystem(url)
    fs.pipe_file(path, data)


def test_a_file_is_read_in_blocks_line_by_line_and_whole(base):
    """Larger than one read block: lines come out as written, whole reads and seeks too."""
    lines = [f"line {i} {'x' * (i % 97)}\n".encode() for i in range(200_000)]
    data = b"".join(lines)
    assert len(data) > 2 * READ_BLOCK
    _put(f"{base}/big.txt", data)
    where = as_location(f"{base}/big.txt")
    with open_stream(where) as stream:
        assert list(stream) == lines
    with where.open() as raw:
        assert raw.readall() == data
        raw.seek(READ_BLOCK + 5)
        assert raw.tell() == READ_BLOCK + 5
        assert raw.read(7) == data[READ_BLOCK + 5 : READ_BLOCK + 12]
    with io.BufferedReader(where.open()) as buffered:
        assert buffered.read() == data


def test_a_gzipped_file_is_decompressed(base):
    text = b"".join(f"{i}\n".encode() for i in range(50_000))
    _put(f"{base}/d.xyz.gz", gzip.compress(text))
    assert open_stream(as_location(f"{base}/d.xyz.gz")).read() == text


def test_exists_names_and_is_file_see_objects_and_prefixes(base):
    for key in ("a.txt", "sub/b.txt", "sub/deeper/c.txt"):
        _put(f"{base}/{key}", key.encode())
    root = as_location(base)
    assert root.exists() and not root.is_file()
    assert root.names() == ["a.txt", "sub"]
    assert root.child("sub").names() == ["b.txt", "deeper"]
    assert root.child("a.txt").is_file() and root.child("a.txt").exists()
    assert root.child("sub/deeper").exists() and not root.child("sub/deeper").is_file()
    assert not root.child("su").exists()  # a prefix of a name is not a folder
    assert root.child("missing").names() == []
    assert root.child("a.txt").info()["size"] == len(b"a.txt")


def test_remove_deletes_one_object_or_everything_below(base):
    for key in ("keep.txt", "gen/x", "gen/y/z", "gen2/w"):
        _put(f"{base}/{key}", b"1")
    root = as_location(base)
    root.child("gen").remove(recursive=True)
    root.child("keep.txt").remove()
    root.child("never-there").remove(recursive=True)  # quiet
    fs, path = filesystem(base)
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(path, refresh=True)) == ["gen2"]


def test_upload_puts_a_local_file(base, tmp_path):
    local = tmp_path / "scaling.data"
    local.write_bytes(b"0 1 2\n" * 1000)
    as_location(f"{base}/scaling.data").upload(local)
    fs, path = filesystem(f"{base}/scaling.data")
    assert fs.cat_file(path) == local.read_bytes()


def test_s3_never_goes_through_fsspec(base):
    with pytest.raises(LocationError, match="through obstore"):
        as_location(base).filesystem()


def test_an_unreachable_service_is_an_os_error_naming_the_location(monkeypatch):
    from dparallel.io import _s3

    point_at_nothing(monkeypatch)
    _s3.clear_clients()
    where = as_location("s3://bucket/prefix")
    try:
        for ask in (where.exists, where.names, where.open, lambda: where.remove(recursive=True)):
            with pytest.raises(OSError, match=r"^s3://bucket/prefix: "):
                ask()
    finally:
        _s3.clear_clients()
