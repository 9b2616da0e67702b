"""A structure file's text as the indexers and readers get it: compressed files streamed."""

from __future__ import annotations

import tracemalloc
from typing import TYPE_CHECKING

import numpy as np
import pytest

from dparallel.errors import InputFormatError
from dparallel.io import _index, _text
from dparallel.io.location import as_location

if TYPE_CHECKING:
    from pathlib import Path


#: Text with every edge the indexers handle: a byte-order mark, CRLF and blank lines, a
#: count too large (frame cut where the next count line starts), one too small (extra
#: atom lines), a truncated last frame; n2p2: a ``begin`` without ``end``, one at the end.
_EDGES = {
    "extxyz": (
        b'\xef\xbb\xbf2\r\nLattice="4 0 0 0 5 0 0 0 6" Properties=species:S:1:pos:R:3\r\n'
        b"H 0 0 0\r\nH 0 0 1\r\n\n3\nenergy=-1\nO 0 0 0\nH 0 0 1\n2\ne=2\nH 0 0 0\nH 1 1 1\n"
        b'1\nx=1\nC 0 0 0\nC 1 0 0\nC 2 0 0\n\n4\nLattice="3 0 0 0 3 0 0 0 3" pbc="T F T"\n'
        b"H 0 0 0\nH 0 0 1\n"
    ),
    "n2p2": (
        b"\xef\xbb\xbfbegin\r\nlattice 4 0 0\r\nlattice 0 5 0\r\nlattice 0 0 6\r\n"
        b"atom 0 0 0 H 0 0 0 0 0\r\nenergy 1\r\nend\r\n\nbegin\natom 0 0 0 O 0 0 0 0 0\n"
        b"begin\natom 1 1 1 H 0 0 0 0 0\natom 1 1 2 H 0 0 0 0 0\nend\n"
        b"begin\natom 0 0 0 H 0 0 0 0 0\n"
    ),
}


def _index_of(path: Path, fmt: str) -> _index.FileIndex:
    return _index.load_or_build_index(as_location(path), fmt, cache=False)


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
@pytest.mark.parametrize("fmt", ["extxyz", "n2p2"])
def test_a_compressed_file_is_indexed_as_its_text(tmp_path, monkeypatch, fmt, suffix):
    """Streamed through blocks of 7 bytes (lines and frames straddle them; a cut frame's
    lines are read again without seeking back), the index of a compressed file is the
    plain text's: same ranges, counts, lines, cells, errors and sample hash (its first
    and last 64 bytes here, kept from the stream), and a file of CR-only lines is refused
    alike."""
    import bz2
    import gzip
    import lzma

    pack = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}[suffix]
    monkeypatch.setattr(_text, "READ_BLOCK", 7)
    monkeypatch.setattr(_text, "SAMPLE_BYTES", 64)
    text = _EDGES[fmt]
    plain, packed = tmp_path / "plain", tmp_path / f"packed{suffix}"
    plain.write_bytes(text)
    packed.write_bytes(pack(text))
    want, got = _index_of(plain, fmt), _index_of(packed, fmt)
    assert len(want.errors) >= 2 and want.ends[-1] == len(text)  # the edges were there
    for key in ("starts", "ends", "counts", "lines", "volumes", "periodic"):
        np.testing.assert_array_equal(getattr(got, key), getattr(want, key), err_msg=key)
    assert got.errors == want.errors
    assert got.sample_sha256 == want.sample_sha256
    cr_only = text.replace(b"\r\n", b"\n").replace(b"\n", b"\r")
    plain.write_bytes(cr_only)
    packed.write_bytes(pack(cr_only))
    with pytest.raises(InputFormatError, match="CR only") as refused:
        _index_of(plain, fmt)
    with pytest.raises(InputFormatError, match="CR only") as also:
        _index_of(packed, fmt)
    said = [
        str(e.value).replace(str(p), "").replace(p.name, "")
        for e, p in ((also, packed), (refused, plain))
    ]
    assert said[0] == said[1]


def _gzipped_frames(path: Path, megabytes: int) -> tuple[int, int]:
    """Write ~``megabytes`` MB of 20-atom extxyz frames, gzipped; return the text's bytes
    and its frames."""
    import gzip

    atoms = "".join(f"H {k}.0 0.5 0.25\n" for k in range(20))
    block = f'20\nLattice="9 0 0 0 9 0 0 0 9" energy=-1.0 pbc="T T T"\n{atoms}'.encode() * 1000
    repeats = max(1, megabytes * 10**6 // len(block))
    text = block * repeats
    path.write_bytes(gzip.compress(text, compresslevel=1))
    return len(text), 1000 * repeats


def test_indexing_a_compressed_file_holds_a_block_not_its_text(tmp_path, monkeypatch):
    # it was decompressed whole (2.7x the text at its peak) to be indexed, and that text
    # stayed in the process for as long as the source was open: the featurize driver
    # held it for the whole run, though only workers read structures
    from dparallel.io.source import open_source

    monkeypatch.setattr(_text, "_LAST", {})
    monkeypatch.setattr(_text, "READ_BLOCK", 1 << 16)  # blocks and samples of 64 KiB
    monkeypatch.setattr(_text, "SAMPLE_BYTES", 1 << 16)
    path = tmp_path / "frames.xyz.gz"
    size, frames = _gzipped_frames(path, 6)
    warm = tmp_path / "warm.xyz.gz"
    _gzipped_frames(warm, 0)
    open_source(warm, cache_index=False)  # its imports and caches, untraced
    _text._LAST.clear()
    tracemalloc.start()
    try:
        source = open_source(path, cache_index=False)  # format, index, first frame's labels
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(source) == frames
    # the index's six 8-byte columns (and their growth room), a few blocks, the samples
    assert peak < 64 * frames + (1 << 20), f"{peak / 1e6:.1f} MB for {size / 1e6:.0f} MB"
    assert not _text._LAST  # the process that opened it keeps none of its text
    tracemalloc.start()
    try:
        assert len(source.read(frames - 1)) == 1  # a worker's read decompresses it, kept
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * size, f"{peak / 1e6:.1f} MB for {size / 1e6:.0f} MB"  # was 3.4x
    assert list(_text._LAST) == [_text._key(source.location)]


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_a_read_that_fails_midway_is_the_sources_error_not_a_damaged_file(
    tmp_path, monkeypatch, suffix
):
    """A compressed remote file is streamed for the whole index pass; a connection reset
    while reading it was reported as "not a readable gzip file" (a damaged file, to be
    replaced), not as the transient failure it is."""
    import bz2
    import gzip
    import io
    import lzma

    from dparallel.io.location import Location

    text = "".join(f"1\nframe={i}\nH 0.0 0.0 {i}.0\n" for i in range(2000)).encode()
    compress = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}[suffix]
    path = tmp_path / f"frames.xyz{suffix}"
    path.write_bytes(compress(text))
    real_open = Location.open

    class Resetting(io.RawIOBase):
        """The file's bytes until half of it is read, then a dropped connection."""

        def __init__(self, raw) -> None:  # noqa: ANN001
            self.raw, self.left = raw, path.stat().st_size // 2

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:  # noqa: ANN001
            if self.left <= 0:
                raise ConnectionResetError("connection reset by peer")
            data = self.raw.read(min(len(buffer), self.left))
            buffer[: len(data)] = data
            self.left -= len(data)
            return len(data)

    monkeypatch.setattr(Location, "open", lambda self, *a, **k: Resetting(real_open(self)))
    monkeypatch.setattr(_text, "READ_BLOCK", 1 << 10)
    with pytest.raises(ConnectionResetError, match="connection reset by peer"):
        _index.load_or_build_index(as_location(path), "extxyz", cache=False)
