"""A structure file edited while a run reads it is refused, never read as a mix."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import ase.io
import pytest

from dparallel.errors import InputError
from dparallel.io import open_source
from dparallel.io.synthetic import random_structures

if TYPE_CHECKING:
    from pathlib import Path


def test_an_input_edited_after_indexing_is_refused_on_read(tmp_path: Path, rng) -> None:
    path = tmp_path / "in.extxyz"
    frames = random_structures(6, rng, max_atoms=5)
    ase.io.write(path, frames, format="extxyz")
    source = open_source(path)
    assert source.read(0, 3).n_structures == 3
    ase.io.write(path, frames[:4], format="extxyz")  # the user rewrites it mid-run
    with pytest.raises(InputError, match="changed while it was being read"):
        source.read(3, 6)
    ase.io.write(path, frames, format="extxyz")  # the same bytes, but written anew
    os.utime(path, ns=(1, 1))
    with pytest.raises(InputError, match="modified since it was indexed"):
        source.read(0, 2)


def test_a_source_sent_to_a_worker_refuses_a_file_changed_since(tmp_path: Path, rng) -> None:
    import pickle

    path = tmp_path / "in.extxyz"
    frames = random_structures(4, rng, max_atoms=5)
    ase.io.write(path, frames, format="extxyz")
    source = open_source(path, cache_index=False)
    len(source)  # indexed on the client
    sent = pickle.dumps(source)
    ase.io.write(path, frames, format="extxyz")  # same structures, written again
    os.utime(path, ns=(5, 5))
    worker = pickle.loads(sent)
    with pytest.raises(InputError, match="changed since it was opened"):
        worker.read(0, 2)


def test_a_compressed_file_is_named_as_such_not_as_a_parse_error(tmp_path: Path, rng) -> None:
    import bz2
    import gzip

    path = tmp_path / "in.extxyz"
    ase.io.write(path, random_structures(2, rng, max_atoms=4), format="extxyz")
    packed = tmp_path / "in.extxyz.zst"  # zstd: not read (the standard library has none)
    packed.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(16))
    with pytest.raises(InputError, match=r"zstd-compressed.*unzstd in.extxyz.zst"):
        open_source(packed, format="extxyz")
    for kind, pack, suffix in (("gzip", gzip.compress, "gz"), ("bzip2", bz2.compress, "bz2")):
        hidden = tmp_path / "in.txt"  # under another name: said, with what to do
        hidden.write_bytes(pack(path.read_bytes()))
        with pytest.raises(InputError, match=rf"{kind}-compressed.*name it ….{suffix}"):
            open_source(hidden, format="extxyz")
    named = tmp_path / "in.extxyz.gz"  # named .gz: read as the text it holds
    named.write_bytes(gzip.compress(path.read_bytes()))
    assert open_source(named).read().n_atoms == open_source(path).read().n_atoms


@pytest.mark.parametrize("cache_index", [True, False])
def test_an_input_deleted_after_opening_fails_the_read_not_the_unpickling(
    tmp_path: Path, rng, cache_index: bool
) -> None:
    """A task's copy of the source is unpickled by Dask before the task runs: raised there,
    a deleted input killed the worker (and the client waited for ever); it must fail the
    task's read instead."""
    import pickle

    from dparallel.errors import SourceNotFoundError

    path = tmp_path / "in.extxyz"
    ase.io.write(path, random_structures(4, rng, max_atoms=5), format="extxyz")
    sent = pickle.dumps(open_source(path, cache_index=cache_index))
    path.unlink()
    task_copy = pickle.loads(sent)  # as the worker does: no error yet
    with pytest.raises(SourceNotFoundError, match=r"input file not found: .*in\.extxyz"):
        task_copy.read(0, 2)


def test_tasks_in_one_process_load_and_hash_the_index_once(
    tmp_path: Path, rng, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each task's copy of a source used to load FILE.dpindex.npz and re-hash all S
    entries (O(S) per task); a worker now keeps the index while the file is unchanged."""
    import pickle

    from dparallel.errors import SourceChangedError
    from dparallel.io import _index

    path = tmp_path / "in.extxyz"
    frames = random_structures(6, rng, max_atoms=5)
    ase.io.write(path, frames, format="extxyz")
    sent = pickle.dumps(open_source(path))
    monkeypatch.setattr(_index, "_KEPT", {})  # a fresh worker process
    calls = {"load": 0, "hash": 0}

    def counted(name: str, real):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(_index, "_load", counted("load", _index._load))
    monkeypatch.setattr(_index, "_layout_hash", counted("hash", _index._layout_hash))
    for _ in range(3):  # three tasks on one worker
        assert pickle.loads(sent).read(0, 2).n_structures == 2
    assert calls == {"load": 1, "hash": 1}
    ase.io.write(path, frames, format="extxyz")  # same structures, written again
    os.utime(path, ns=(5, 5))
    with pytest.raises(SourceChangedError, match="changed since it was opened"):
        pickle.loads(sent).read(0, 2)
