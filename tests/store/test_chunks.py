"""The per-partition arrays and group documents read at once (``store/_chunks.py``): the same
values zarr reads, from a folder and from any other zarr store; a chunk gone or torn named
as before."""

from __future__ import annotations

import logging

import ase.io
import numpy as np
import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, MemoryStore

from dparallel.errors import StoreError
from dparallel.io.synthetic import random_structures
from dparallel.store import open_store
from dparallel.store._chunks import chunk_decoder, read_keys
from dparallel.workflow.ingest import IngestOptions, ingest

_PARTITION_ARRAYS = ("done", "n_structures", "n_atoms", "elements")


@pytest.fixture
def store_path(tmp_path, rng):
    """An ingested store of several partitions, two structures skipped."""
    frames = random_structures(40, rng, max_atoms=8)
    data = tmp_path / "data.xyz"
    ase.io.write(data, frames, format="extxyz")
    with open(data, "a") as f:  # two frames ingest skips, in different partitions
        f.write("1\nProperties=species:S:1:pos:R:3\nZz 0 0 0\n")
    text = data.read_text()
    data.write_text("1\nProperties=species:S:1:pos:R:3\nXx 0 0 0\n" + text)
    ingest(data, tmp_path / "s.zarr", IngestOptions(partition_atoms=20, on_error="skip"))
    return tmp_path / "s.zarr"


def _in_memory(path) -> MemoryStore:
    """The store's every key copied into a zarr ``MemoryStore``."""
    local, memory = LocalStore(path), MemoryStore()
    prototype = default_buffer_prototype()

    async def copy() -> None:
        async for key in local.list():
            await memory.set(key, await local.get(key, prototype))

    sync(copy())
    return memory


def test_info_reads_the_values_zarr_reads(store_path):
    store = open_store(store_path)
    assert store.n_partitions >= 8
    done = store._done_flags()
    assert done.all()
    for name in _PARTITION_ARRAYS:
        ours = store._read_done_rows(f"partitions/{name}", done)
        theirs = zarr.open_array(str(store_path / "partitions" / name), mode="r")[...]
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), name
    info = store.info()
    assert [r["index"] for r in info["skipped"]] == [0, 41]
    assert info["n_atoms"] == int(
        zarr.open_array(str(store_path / "structures" / "n_atoms"))[...].sum()
    )
    # a store that is no folder (requested concurrently) reads the same
    other = open_store(_in_memory(store_path)).info()
    assert {**other, "path": None, "zarr_root": None} == {**info, "path": None, "zarr_root": None}


def test_read_keys_gives_none_for_what_is_not_there(store_path):
    keys = ["partitions/done/c.0", "partitions/done/c.999", "nothing/here"]
    local = read_keys(LocalStore(store_path), keys)
    memory = read_keys(_in_memory(store_path), keys)
    assert local == memory and local[0] == (store_path / keys[0]).read_bytes()
    assert local[1:] == [None, None]


def test_the_decoder_decodes_every_chunk_as_zarr_and_refuses_one_cut_short(store_path):
    for name in ("structures/positions", "structures/pbc", "partitions/elements"):
        array = zarr.open_array(str(store_path / name), mode="r")
        decode = chunk_decoder(array.metadata)
        key = array.metadata.encode_chunk_key((1, *(0,) * (array.ndim - 1)))
        rows = array.chunks[0]
        data = (store_path / name / key).read_bytes()
        assert np.array_equal(decode(data), array[rows : 2 * rows]), name
        with pytest.raises(ValueError, match="cut short"):
            decode(data[:-1])
    tags = zarr.open_array(str(store_path / "structures" / "tags"), mode="r")
    assert chunk_decoder(tags.metadata) is None  # strings: read through zarr


def test_a_torn_count_of_a_done_partition_is_named_and_one_of_a_pending_one_ignored(store_path):
    chunk = store_path / "partitions" / "n_atoms" / "c.3"
    chunk.write_bytes(chunk.read_bytes()[:10])
    with pytest.raises(StoreError, match=r"cannot read partitions/n_atoms .*c\.3.*cut short"):
        _ = open_store(store_path).n_atoms  # (info of a complete store reads its summary)
    writer = open_store(store_path, mode="r+")
    writer.clear_done(3)  # a task killed while writing its counts: not done, not counted
    info = open_store(store_path).info()
    assert info["partitions_done"] == info["partitions_total"] - 1


def test_a_torn_done_marker_reads_as_not_done_with_one_warning(store_path, caplog):
    chunk = store_path / "partitions" / "done" / "c.2"
    chunk.write_bytes(chunk.read_bytes()[:5])
    caplog.set_level(logging.WARNING)
    store = open_store(store_path)
    assert store.pending_partitions().tolist() == [2]
    assert store.pending_partitions().tolist() == [2]
    assert caplog.text.count("the done marker of partition 2 is unreadable") == 1


def test_an_older_stores_chunk_keys_read_the_same(store_path):
    """Formats 1 and 2 kept zarr's default chunk keys (``c/3``, a folder per leading
    index): the keys come from each array's own metadata, so such a store reads the same."""
    before = open_store(store_path).info()
    for name in _PARTITION_ARRAYS:
        path = store_path / "partitions" / name
        old = zarr.open_array(str(path), mode="r")
        values, attributes = old[...], old.attrs.asdict()
        kwargs = {"dimension_names": old.metadata.dimension_names, "compressors": old.compressors}
        new = zarr.create_array(
            str(path), shape=old.shape, chunks=old.chunks, dtype=old.dtype,
            fill_value=old.fill_value, overwrite=True, **kwargs,
        )  # fmt: skip
        new[...] = values
        new.attrs.update(attributes)
        assert (path / "c" / "0").exists()  # c/0, not c.0
    after = open_store(store_path).info()
    assert {**after, "arrays": None} == {**before, "arrays": None}
