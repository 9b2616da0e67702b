"""Files torn by a crash or a full disk: a torn done marker means not done; others are named."""

from __future__ import annotations

import errno

import ase.io
import numpy as np
import pytest
import zarr

from dparallel.cli.main import main
from dparallel.errors import StoreError
from dparallel.io.synthetic import random_structures
from dparallel.store import open_store
from dparallel.workflow.ingest import IngestOptions, ingest


def _chunk_file(array_dir, *coords):
    """The file of chunk ``coords`` of the zarr array at ``array_dir`` (its own key encoding)."""
    array = zarr.open_array(str(array_dir), mode="r")
    return array_dir / array.metadata.encode_chunk_key(coords)


@pytest.fixture
def store_path(tmp_path, rng):
    data = tmp_path / "data.xyz"
    ase.io.write(data, random_structures(30, rng, max_atoms=15), format="extxyz")
    ingest(data, tmp_path / "s.zarr", IngestOptions(partition_atoms=40))
    return tmp_path / "s.zarr"


def test_a_torn_done_marker_counts_as_not_done_and_a_rerun_redoes_it(store_path, tmp_path):
    store = open_store(store_path)
    total = store.n_partitions
    assert store.is_complete
    _chunk_file(store_path / "partitions" / "done", 2).write_bytes(b"")  # truncated
    again = open_store(store_path)
    assert 2 not in again.done_partitions().tolist()
    assert again.pending_partitions().tolist() == [2]
    result = ingest(tmp_path / "data.xyz", store_path, IngestOptions(partition_atoms=40))
    assert result.partitions_written == 1 and result.store.is_complete
    assert len(result.store.done_partitions()) == total


def test_another_torn_chunk_is_one_error_naming_the_array(store_path, capsys):
    chunk = _chunk_file(store_path / "structures" / "positions", 1, 0)
    chunk.write_bytes(chunk.read_bytes()[:7])
    store = open_store(store_path)
    with pytest.raises(StoreError, match=r"cannot read structures/positions \(a chunk or its"):
        store.read_structures(0, store.n_structures)
    assert main(["info", str(store_path), "--json"]) == 0  # metadata still reads
    capsys.readouterr()


def test_full_disk_while_updating_the_root_keeps_the_old_document(store_path, monkeypatch):
    import zarr.storage._local as local

    store = open_store(store_path, mode="r+")
    document = store_path / "zarr.json"
    before = document.read_bytes()
    original = local._put

    def full(path, value, *args, **kwargs):
        if path.name == "zarr.json" and path.parent == store_path:
            path.write_bytes(b"")  # zarr opened it with "wb": the old content is gone
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return original(path, value, *args, **kwargs)

    monkeypatch.setattr(local, "_put", full)
    from dparallel.errors import DiskFullError

    with pytest.raises(DiskFullError, match=r"s\.zarr/zarr\.json: no space left on the device"):
        store.update_attrs({"statistics": {"x": 1}})
    monkeypatch.undo()
    assert document.read_bytes() == before
    assert "statistics" not in open_store(store_path).attrs


def test_a_root_document_zarr_did_not_touch_is_left_alone(store_path, monkeypatch, caplog):
    """A read-only store (zarr 3.1 writes a new file and renames it: the old document
    stands): update_attrs logged "zarr.json could not be restored; the store needs it", an
    ERROR about a store that was whole, beside the run's own error."""
    import zarr.storage._local as local

    import dparallel.store._writes as _writes

    store = open_store(store_path, mode="r+")
    before = (store_path / "zarr.json").read_bytes()

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(local, "_put", read_only)
    monkeypatch.setattr(_writes, "write_file", read_only)  # dparallel's writes too
    with pytest.raises(OSError, match="Read-only"):
        store.update_attrs({"statistics": {"x": 1}})
    assert (store_path / "zarr.json").read_bytes() == before
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


def test_a_store_whose_root_document_is_gone_is_not_replaced_but_explained(store_path, tmp_path):
    (store_path / "zarr.json").write_bytes(b"")
    argv = ["ingest", str(tmp_path / "data.xyz"), "-o", str(store_path), "--overwrite", "-q"]
    assert main(argv) == 2
    assert (store_path / "structures").is_dir()  # nothing was deleted


def test_damaged_store_message(store_path, tmp_path, capsys):
    (store_path / "zarr.json").write_bytes(b"{")
    assert main(["ingest", str(tmp_path / "data.xyz"), "-o", str(store_path), "-q"]) == 2
    err = capsys.readouterr().err
    assert "looks like a damaged dparallel store" in err and f"rm -r {store_path}" in err
    assert "--overwrite" not in err


def test_features_of_an_attempt_killed_mid_write_are_redone_whole(tmp_path, rng):
    """A task killed while creating its groups (a group without metadata above arrays that
    exist) is retried: the retry's write brings back every array under every group."""
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = tmp_path / "data.xyz"
    frames = random_structures(12, rng, min_atoms=3, max_atoms=12, elements=(1, 6, 8))
    ase.io.write(data, frames, format="extxyz")
    acsf = ACSF.uniform(["H", "C", "O"], r_cut=3.0, cutoff="cos", radial=[(0.5, 0.0)],
                        narrow=[(0.1, 1.0, 1.0, 0.0)], wide=[])  # fmt: skip
    dset = DescriptorSet(acsf=acsf, derivatives=True)
    store = featurize_in_process(
        data, tmp_path / "f.zarr", dset, FeaturizeOptions(partition_atoms=40)
    )
    p = 0
    want = store.read_features(p, "acsf")
    element = next(e for e, a in want.items() if any(k.startswith("d/") for k in a))
    torn = tmp_path / "f.zarr" / "parts" / str(p) / "features" / "acsf" / element / "d"
    (torn / "zarr.json").unlink()  # the kill came before this level's metadata
    assert not any(
        k.startswith("d/") for k in open_store(store.path).read_features(p, "acsf")[element]
    )
    writer = open_store(store.path, mode="r+")
    writer.clear_done(p)
    writer.write_features(p, {"acsf": want})  # the retry
    got = open_store(store.path).read_features(p, "acsf")
    assert set(got) == set(want)
    for e, arrays in want.items():
        assert set(got[e]) == set(arrays)


@pytest.mark.parametrize("what", ["chunk", "metadata"])
def test_a_damaged_feature_array_is_a_store_error_naming_it(tmp_path, rng, what):
    """A feature chunk cut short (a blosc error) or its zarr.json broken (a JSON error)
    reached training as the codec's traceback; it is one StoreError naming the array."""
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = tmp_path / "data.xyz"
    frames = random_structures(6, rng, min_atoms=3, max_atoms=8, elements=(1, 6, 8))
    ase.io.write(data, frames, format="extxyz")
    acsf = ACSF.uniform(["H", "C", "O"], r_cut=3.0, radial=[(0.5, 0.0)], narrow=[], wide=[])
    store = featurize_in_process(
        data, tmp_path / "f.zarr", DescriptorSet(acsf=acsf), FeaturizeOptions(partition_atoms=40)
    )
    element = sorted(store.read_features(0, "acsf"))[0]
    values = tmp_path / "f.zarr" / "parts" / "0" / "features" / "acsf" / element / "values"
    target = _chunk_file(values, 0, 0) if what == "chunk" else values / "zarr.json"
    target.write_bytes(target.read_bytes()[: 20 if what == "chunk" else 5])
    with pytest.raises(StoreError, match=r"cannot read parts/0/features/acsf .*corrupt"):
        open_store(tmp_path / "f.zarr").read_features(0, "acsf")


@pytest.mark.parametrize("how", ["deleted", "a group's"])
def test_a_feature_array_whose_metadata_is_gone_is_a_store_error_naming_it(tmp_path, rng, how):
    """``atom_index``'s zarr.json deleted, or replaced by a group's: zarr no longer sees an
    array there, so the element's arrays lacked it and training died with a KeyError
    traceback (found by fuzzing the store's files); it is one StoreError naming it."""
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import featurize_in_process

    data = tmp_path / "data.xyz"
    ase.io.write(data, random_structures(4, rng, min_atoms=3, max_atoms=6, elements=(1, 8)))
    acsf = ACSF.uniform(["H", "O"], r_cut=3.0, radial=[(0.5, 0.0)], narrow=[], wide=[])
    store = featurize_in_process(data, tmp_path / "f.zarr", DescriptorSet(acsf=acsf))
    element = sorted(store.read_features(0, "acsf"))[0]
    group = tmp_path / "f.zarr" / "parts" / "0" / "features" / "acsf" / element
    document = group / "atom_index" / "zarr.json"
    if how == "deleted":
        document.unlink()
    else:
        document.write_bytes((group / "zarr.json").read_bytes())
    with pytest.raises(StoreError, match=rf"cannot read parts/0/features/acsf/{element}/atom_in"):
        open_store(tmp_path / "f.zarr").read_features(0, "acsf")


_STRUCTURE_ARRAYS = [
    "numbers",
    "positions",
    "forces",
    "cells",
    "pbc",
    "energy",
    "n_atoms",
    "source_index",
]


@pytest.mark.parametrize("name", [f"structures/{n}" for n in _STRUCTURE_ARRAYS])
def test_a_deleted_structure_chunk_of_a_done_partition_is_an_error(store_path, name):
    """zarr reads a missing chunk as its fill value: a deleted chunk file read as zero
    positions, NaN energies or a partition of no atoms. Every read of it is now a
    StoreError naming the array and the chunk."""
    store = open_store(store_path)
    p = 1  # not the first, so that the ones before it still read
    lo, hi = (int(c) for c in store._cumulative()[p : p + 2])
    whole = store.read_structures(0, store.n_structures)
    array = zarr.open_array(str(store_path / name), mode="r")
    _chunk_file(store_path / name, p, *([0] * (array.ndim - 1))).unlink()
    damaged = open_store(store_path)
    with pytest.raises(
        StoreError, match=rf"{name}: chunk c\.{p}\S* of a done partition is missing"
    ):
        damaged.read_partition(p)
    with pytest.raises(StoreError, match="is missing"):
        damaged.read_structures(lo, hi)
    if name == "structures/source_index":
        with pytest.raises(StoreError, match="is missing"):
            damaged.source_indices(lo, hi)
    # the other partitions still read, equal to what they were
    assert damaged.read_structures(0, lo).equals(whole.select(0, lo))


@pytest.mark.parametrize("name", ["n_structures", "n_atoms", "elements"])
def test_a_deleted_partition_count_of_a_done_partition_is_an_error(store_path, name):
    _chunk_file(store_path / "partitions" / name, 1, *([0] * (name == "elements"))).unlink()
    damaged = open_store(store_path)
    with pytest.raises(StoreError, match=rf"partitions/{name}: chunk c\.1\S* of a done"):
        _ = damaged.n_structures, damaged.n_atoms, damaged.elements


def test_a_deleted_feature_chunk_is_an_error(tmp_path, rng):
    """Every array of a partition's group is written whole, its chunk before its metadata:
    a chunk missing under its metadata is damage, not fill values to train on."""
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = tmp_path / "data.xyz"
    frames = random_structures(6, rng, min_atoms=3, max_atoms=8, elements=(1, 8))
    ase.io.write(data, frames, format="extxyz")
    acsf = ACSF.uniform(["H", "O"], r_cut=3.0, radial=[(0.5, 0.0)], narrow=[], wide=[])
    store = featurize_in_process(
        data, tmp_path / "f.zarr", DescriptorSet(acsf=acsf), FeaturizeOptions(partition_atoms=40)
    )
    group = tmp_path / "f.zarr" / "parts" / "0" / "features" / "acsf"
    arrays = sorted(
        p.parent
        for p in group.rglob("zarr.json")
        if (p.parent / "c.0").exists() or any(p.parent.glob("c.*"))
    )
    arrays = [a for a in arrays if zarr.open_array(str(a), mode="r").size]
    assert len(arrays) >= 4  # values, atom_index, pairs, vectors_t, dG_dr_split …
    for array in arrays:
        chunk = next(array.glob("c.*"))
        kept = chunk.read_bytes()
        chunk.unlink()
        with pytest.raises(StoreError, match=r"of a done partition is missing"):
            open_store(store.path).read_features(0, "acsf")
        chunk.write_bytes(kept)
    open_store(store.path).read_features(0, "acsf")  # whole again


def test_a_store_made_before_every_chunk_was_written_reads_its_missing_chunks_as_fill(
    store_path,
):
    """Earlier versions left an all-fill chunk out (e.g. the cells of molecules): without
    ``every_chunk_written`` a missing chunk still reads as fill values."""
    store = open_store(store_path, mode="r+")
    meta = dict(store.attrs)
    del meta["every_chunk_written"]
    zarr.open_group(str(store_path), mode="r+").attrs["dparallel"] = meta
    whole = open_store(store_path).read_partition(1)
    _chunk_file(store_path / "structures" / "energy", 1).unlink()
    old = open_store(store_path).read_partition(1)
    assert np.isnan(old.energy).all() and old.positions.shape == whole.positions.shape


@pytest.mark.parametrize("cut", ["half", "one byte"])
def test_a_blosc_chunk_cut_short_is_a_store_error_not_values(store_path, cut):
    """numcodecs' Blosc trusts a frame's header: a chunk cut short decoded without an
    error, into values read past its end (a small chunk is stored uncompressed in its
    frame; a compressed one cut by a byte read as if whole). Each is a StoreError."""
    chunk = _chunk_file(store_path / "structures" / "source_index", 1)
    data = chunk.read_bytes()
    chunk.write_bytes(data[: len(data) // 2 if cut == "half" else len(data) - 1])
    store = open_store(store_path)
    with pytest.raises(StoreError, match=r"cannot read structures/source_index .*cut short"):
        store.read_structures(0, store.n_structures)


def test_blosc_frames_are_checked_for_zarr_too(tmp_path):
    """The check is zarr's blosc codec once dparallel.store is imported: a whole frame
    reads as it was written, one cut short is refused."""
    import dparallel.store._checked_blosc  # noqa: F401

    array = zarr.create_array(
        tmp_path / "a.zarr", shape=(11,), chunks=(11,), dtype="int64",
        compressors=zarr.codecs.BloscCodec(cname="lz4"),
    )  # fmt: skip
    array[:] = np.arange(11)
    assert zarr.open_array(tmp_path / "a.zarr", mode="r")[:].tolist() == list(range(11))
    chunk = _chunk_file(tmp_path / "a.zarr", 0)
    chunk.write_bytes(chunk.read_bytes()[:-1])
    with pytest.raises(ValueError, match="Blosc frame of"):
        zarr.open_array(tmp_path / "a.zarr", mode="r")[:]


def test_a_store_whose_root_document_is_torn_is_not_sent_to_overwrite(store_path, tmp_path):
    """Its error said "featurize it again with --overwrite", which refuses it (a folder or
    prefix that is not provably a store is never replaced): it says to remove it."""
    root = store_path / "zarr.json"
    root.write_bytes(root.read_bytes()[:30])
    with pytest.raises(StoreError) as info:
        open_store(store_path)
    assert "zarr.json cannot be read" in str(info.value)
    assert "remove it and make it again (the ingest or featurize" in str(info.value)
    with pytest.raises(StoreError, match="remove it yourself"):
        ingest(tmp_path / "data.xyz", store_path, IngestOptions(partition_atoms=40, overwrite=True))


@pytest.mark.parametrize("made_by", ["ingest", "featurize"])
def test_a_damaged_store_names_the_command_that_made_it(tmp_path, rng, made_by):
    """Every damage message said "featurize the store again", also for a store that
    ``ingest`` made (structures only), which featurize does not remake."""
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = tmp_path / "data.xyz"
    ase.io.write(data, random_structures(8, rng, min_atoms=3, max_atoms=8, elements=(1, 8)))
    path = tmp_path / "s.zarr"
    if made_by == "ingest":
        ingest(data, path, IngestOptions(partition_atoms=20))
    else:
        acsf = ACSF.uniform(["H", "O"], r_cut=3.0, radial=[(0.5, 0.0)], narrow=[], wide=[])
        featurize_in_process(
            data, path, DescriptorSet(acsf=acsf), FeaturizeOptions(partition_atoms=20)
        )
    assert open_store(path).made_by == made_by
    other = {"ingest": "featurize", "featurize": "ingest"}[made_by]
    fix = rf"rerun the {made_by} that made it with --repair to compute only the damaged"
    positions = _chunk_file(path / "structures" / "positions", 1, 0)
    kept = positions.read_bytes()
    positions.unlink()  # a chunk gone
    with pytest.raises(StoreError, match=fix) as info:
        open_store(path).read_partition(1)
    assert other not in str(info.value)
    positions.write_bytes(kept[:7])  # a chunk torn
    with pytest.raises(StoreError, match=fix):
        open_store(path).read_partition(1)
    _chunk_file(path / "partitions" / "n_atoms", 1).write_bytes(b"xx")  # read whole
    with pytest.raises(StoreError, match=fix):
        _ = open_store(path).n_atoms
    # and the advice mends it: the command that made the store, with --repair
    if made_by == "ingest":
        ingest(data, path, IngestOptions(partition_atoms=20, repair=True))
    else:
        featurize_in_process(
            data, path, DescriptorSet(acsf=acsf), FeaturizeOptions(partition_atoms=20, repair=True)
        )
    store, frames = open_store(path), ase.io.read(data, ":")
    start, stop = store.partition_range(1)
    np.testing.assert_array_equal(
        store.read_partition(1).positions,
        np.concatenate([a.positions for a in frames[start:stop]]),
    )
    assert int(np.sum(store.n_atoms)) == sum(len(a) for a in frames)
