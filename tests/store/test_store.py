"""Store layout, reopen/mismatch rules, partition writes and read-back, generic hooks."""

from __future__ import annotations

import dataclasses
import json
import pickle

import ase.io
import numpy as np
import pytest
import zarr

from dparallel.errors import StoreError, StoreIncompleteError, StoreMismatchError
from dparallel.io import open_source
from dparallel.io.synthetic import random_structures
from dparallel.store import FORMAT_VERSION, create_store, open_store
from dparallel.store.plan import plan_partitions
from dparallel.types import StructureBatch
from dparallel.workflow.ingest import IngestOptions, ingest, ingest_partition, prepare_ingest


@pytest.fixture
def xyz(tmp_path, rng):
    path = tmp_path / "data.xyz"
    frames = random_structures(30, rng, max_atoms=15)
    frames[2].info["set"] = "test"
    ase.io.write(path, frames, format="extxyz")
    return path


def _new(tmp_path, src, target=40, config=None, **kw):
    kw.setdefault("plan", plan_partitions(src.atom_counts, target))
    return create_store(
        tmp_path / "s.zarr",
        source_fingerprint=src.fingerprint(),
        config=config or {"ingest": {"x": 1}},
        **kw,
    )


def test_ingest_roundtrip_equals_ase(tmp_path, xyz):
    result = ingest(xyz, tmp_path / "s.zarr", IngestOptions(partition_atoms=40))
    store = open_store(tmp_path / "s.zarr")
    ref = StructureBatch.from_ase(ase.io.read(xyz, ":"))
    assert store.is_complete and store.n_structures == 30 and store.n_atoms == ref.n_atoms
    assert result.partitions_written == store.n_partitions > 3
    got = store.read_structures(0, 30)
    assert got.equals(ref)  # positions, numbers, cell, pbc, energy, forces, tags: exact
    assert store.read_structures(5, 23).equals(ref.select(5, 23))
    np.testing.assert_array_equal(store.source_indices(), np.arange(30))
    assert store.elements == sorted(set(ref.numbers.tolist()))
    for p in range(store.n_partitions):
        a, b = store.partition_range(p)
        assert store.read_partition(p).equals(ref.select(a, b))
        assert store.report(p)["n_structures"] == b - a


def test_layout_attrs_and_chunks(tmp_path, xyz):
    src = open_source(xyz)
    store = _new(tmp_path, src, config={"ingest": {"units": "ase"}})
    A, K = store.atom_slots, store.structure_slots
    P = store.n_partitions
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    meta = root.attrs["dparallel"]
    assert meta["format_version"] == FORMAT_VERSION
    assert set(meta["versions"]) >= {"dparallel", "torch", "zarr"}
    assert meta["versions"]["zarr"] == zarr.__version__
    assert meta["source"] == json.loads(json.dumps(src.fingerprint()))
    assert meta["config"] == {"ingest": {"units": "ase"}}
    assert meta["plan"]["stops"][-1] == 30
    assert root["structures/positions"].shape == (P * A, 3)
    assert root["structures/positions"].chunks == (A, 3)
    assert root["structures/energy"].chunks == (K,)
    assert root["partitions/done"].chunks == (1,)
    assert not store.is_complete and len(store.pending_partitions()) == P
    with pytest.raises(StoreIncompleteError, match=f"{P} of {P} partitions are not done"):
        store.read_structures(0, 1)


def test_reopen_same_returns_existing_and_mismatch_refused(tmp_path, xyz, rng):
    src = open_source(xyz)
    store = _new(tmp_path, src)
    ingest_partition(src, store, 0)
    again = _new(tmp_path, src)
    np.testing.assert_array_equal(again.done_partitions(), [0])  # kept for resume
    with pytest.raises(StoreMismatchError, match=r"another source or config: config .*--overwrite"):
        _new(tmp_path, src, config={"ingest": {"x": 2}})
    other = tmp_path / "other.xyz"
    ase.io.write(other, random_structures(30, rng, max_atoms=15), format="extxyz")
    osrc = open_source(other)
    with pytest.raises(StoreMismatchError, match=r"source .*data.xyz ≠ .*other.xyz"):
        _new(tmp_path, osrc)
    fresh = _new(tmp_path, osrc, overwrite=True)
    assert len(fresh.done_partitions()) == 0
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("mine")
    with pytest.raises(StoreMismatchError, match="not a dparallel store"):
        create_store(
            tmp_path / "junk",
            source_fingerprint=src.fingerprint(),
            plan=plan_partitions(src.atom_counts, 40),
            config={},
        )
    with pytest.raises(StoreError, match=r"plan covers 29 structures / \d+ atoms, the source has"):
        _new(tmp_path, src, plan=plan_partitions(src.atom_counts[:-1], 40))  # not the source's


def test_rewrite_is_idempotent_and_readonly_refuses(tmp_path, xyz):
    src = open_source(xyz)
    store = prepare_ingest(src, tmp_path / "s.zarr", IngestOptions(partition_atoms=40))
    for p in range(store.n_partitions):
        ingest_partition(src, store, p)
    ingest_partition(src, store, 1)  # a retried task rewrites the same chunks
    ro = open_store(tmp_path / "s.zarr")
    assert ro.read_structures().equals(src.read())
    with pytest.raises(StoreError, match="read-only"):
        ro.mark_done(0)
    assert pickle.loads(pickle.dumps(ro)).read_structures(3, 4).equals(src.read(3, 4))


def test_atom_array_and_partition_array_hooks(tmp_path, xyz):
    src = open_source(xyz)
    store = prepare_ingest(src, tmp_path / "s.zarr", IngestOptions(partition_atoms=40))
    store.create_atom_array("g", (4,), np.float32, attributes={"unit": "1"})
    store.create_atom_array("g", (4,), np.float32)  # same spec: no-op
    with pytest.raises(StoreMismatchError, match="atoms/g exists"):
        store.create_atom_array("g", (5,), np.float32)
    batch = src.read()
    feats = np.arange(batch.n_atoms * 4, dtype=np.float32).reshape(-1, 4)  # (N, 4)
    for p in range(store.n_partitions):
        a, b = store.partition_range(p)
        ingest_partition(src, store, p)
        store.write_atom_array("g", p, feats[batch.offsets[a] : batch.offsets[b]])
        store.write_partition_arrays(p, {"pairs": np.full((p + 2, 2), p)}, group="nbr")
    np.testing.assert_array_equal(store.read_atom_array("g", 0, 30), feats)
    np.testing.assert_array_equal(
        store.read_atom_array("g", 4, 17), feats[batch.offsets[4] : batch.offsets[17]]
    )
    got = store.read_partition_arrays(2, group="nbr")
    np.testing.assert_array_equal(got["pairs"], np.full((4, 2), 2))
    assert "atoms/g" in store.info()["arrays"]
    # strings go through zarr's API, beside numbers written directly, in a nested group
    names = np.array(["Cu", "Au", "Ni"])
    store.write_partition_arrays(1, {"names": names, "z": np.arange(3)}, group="lab/el")
    got = store.read_partition_arrays(1, group="lab/el")
    assert got["names"].tolist() == names.tolist() and got["z"].tolist() == [0, 1, 2]
    # the rows of a partition whose tags are set go through zarr too; unset ones are fill
    tags = [f"set={k}" for k in range(batch.n_structures)]
    tagged = dataclasses.replace(batch, tags=np.asarray(tags, dtype=object))
    a, b = store.partition_range(3)
    store.write_structures(3, tagged.select(a, b), source_index=np.arange(a, b))
    assert store.read_structures(a, b).tags.tolist() == tags[a:b]
    assert set(store.read_structures(*store.partition_range(2)).tags.tolist()) == {""}


def test_numeric_arrays_use_lz4_shuffle_strings_the_default(tmp_path, xyz):
    """docs/store-format.md: numeric chunks (floats too) are Blosc LZ4 behind a byte shuffle."""
    src = open_source(xyz)
    store = prepare_ingest(src, tmp_path / "s.zarr", IngestOptions(partition_atoms=40))
    store.create_atom_array("g", (2,), np.float32)
    store.write_partition_arrays(
        0, {"d": np.ones((3, 4, 3)), "i": np.arange(6, dtype=np.int32)}, group="features"
    )
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    numeric = [
        "structures/positions",
        "structures/numbers",
        "structures/pbc",
        "partitions/done",
        "atoms/g",
        "parts/0/features/d",
        "parts/0/features/i",
    ]
    for name in numeric:
        (codec,) = root[name].compressors
        assert isinstance(codec, zarr.codecs.BloscCodec), name
        assert (codec.cname.value, codec.shuffle.value) == ("lz4", "shuffle"), name
        assert codec.typesize == root[name].dtype.itemsize, name
    np.testing.assert_array_equal(root["parts/0/features/d"][...], np.ones((3, 4, 3)))
    assert not any(
        isinstance(c, zarr.codecs.BloscCodec) for c in root["structures/tags"].compressors
    )


def _ingested_with_skips(tmp_path, middle: str | None = None):
    """``input.data`` of two-atom structures with a non-finite one at indices 3 and 8
    (the structures between them: ``middle``, default four more H2), ingested with
    ``on_error="skip"`` into ``tmp_path / "s.zarr"``; the store's path."""
    path = tmp_path / "input.data"
    h2 = "begin\natom 0 0 0 H 0 0 0 0 0\natom 0 0 0.7 H 0 0 0 0 0\nenergy -1\nend\n"
    bad = "begin\natom 0 0 nan H 0 0 0 0 0\nend\n"
    path.write_text(h2 * 3 + bad + (h2 * 4 if middle is None else middle) + bad + h2)
    ingest(path, tmp_path / "s.zarr", IngestOptions(on_error="skip", partition_atoms=4))
    return tmp_path / "s.zarr"


def test_skipped_records_and_info(tmp_path):
    store = open_store(_ingested_with_skips(tmp_path))
    assert store.n_structures == 8 and store.n_atoms == 16
    assert [i for i, _ in store.skipped()] == [3, 8]
    assert "line 17: atom 0: non-finite coordinates" in store.skipped()[0][1]  # its line
    np.testing.assert_array_equal(store.source_indices(), [0, 1, 2, 4, 5, 6, 7, 9])
    by_partition = [store.partition_source_indices(p) for p in range(store.n_partitions)]
    np.testing.assert_array_equal(np.concatenate(by_partition), store.source_indices())
    # an incomplete store has no source_indices(), its done partitions still have theirs
    last = store.n_partitions - 1
    writable = open_store(tmp_path / "s.zarr", mode="r+")
    writable.clear_done(last)
    with pytest.raises(StoreIncompleteError, match="are not done"):
        open_store(tmp_path / "s.zarr").source_indices()
    np.testing.assert_array_equal(
        open_store(tmp_path / "s.zarr").partition_source_indices(0), by_partition[0]
    )
    with pytest.raises(StoreIncompleteError, match=f"partition {last} is not done"):
        open_store(tmp_path / "s.zarr").partition_source_indices(last)
    writable.mark_done(last)
    info = store.info()
    assert info["n_skipped"] == 2 and info["skipped"][1]["index"] == 8
    assert info["complete"] and info["partitions_done"] == info["partitions_total"]
    assert info["elements"] == ["H"]


def test_mismatch_error_names_the_callers_overwrite_option_and_pickles():
    """Renamed, only the option changes: a path that holds the option's own text stays as
    it is (the rename replaced the text everywhere)."""
    from dparallel.store._create import OVERWRITE_OPTION

    where = f"runs/{OVERWRITE_OPTION}/s.zarr"
    error = StoreMismatchError.naming_option(
        f"{where} differs. Pass ", OVERWRITE_OPTION, " to replace it."
    )
    assert str(error) == f"{where} differs. Pass {OVERWRITE_OPTION} to replace it."
    named = error.naming("--set store.overwrite=true")
    assert str(named) == f"{where} differs. Pass --set store.overwrite=true to replace it."
    assert named.overwrite_option == "--set store.overwrite=true"
    assert error.naming(OVERWRITE_OPTION) is error
    plain = StoreMismatchError("s.zarr is not a dparallel store")
    assert plain.naming("--set store.overwrite=true") is plain  # names no option: unchanged
    back = pickle.loads(pickle.dumps(named))
    assert str(back) == str(named) and back.overwrite_option == named.overwrite_option
    assert str(back.naming("-f")) == f"{where} differs. Pass -f to replace it."


@pytest.mark.parametrize("where", ["folder", "url", "memory"])
def test_fill_valued_atom_and_partition_arrays_are_stored(tmp_path, xyz, where):
    """All-zero rows (the fill value) are a chunk like any other: a done partition reads
    them back, where a missing chunk would be damage."""
    from zarr.storage import MemoryStore

    target = {
        "folder": tmp_path / "s.zarr",
        "url": f"memory://fill-valued-{tmp_path.name}/s.zarr",
        "memory": MemoryStore(),
    }[where]
    src = open_source(xyz)
    store = create_store(
        target,
        source_fingerprint=src.fingerprint(),
        plan=plan_partitions(src.atom_counts, 40),
        config={"ingest": {"x": 1}},
    )
    store.create_atom_array("charge", (), np.float32)
    store.create_atom_array("dipole", (3,), np.float64)
    batch = src.read()
    for p in range(store.n_partitions):
        a, b = store.partition_range(p)
        store.write_structures(p, batch.select(a, b), source_index=np.arange(a, b))
        n = int(batch.offsets[b] - batch.offsets[a])
        store.write_atom_array("charge", p, np.zeros(n, np.float32))
        store.write_atom_array("dipole", p, np.zeros((n, 3)))
        store.write_partition_arrays(p, {"zero": np.zeros((2, 2)), "off": np.zeros(3, bool)})
        store.mark_done(p)
    ro = open_store(target if where != "memory" else store.zarr_store)
    assert ro.is_complete
    np.testing.assert_array_equal(ro.read_atom_array("charge", 0, 30), np.zeros(batch.n_atoms))
    assert ro.read_atom_array("dipole", 3, 9).shape == (batch.offsets[9] - batch.offsets[3], 3)
    got = ro.read_partition_arrays(1)
    assert got["zero"].tolist() == [[0, 0], [0, 0]] and got["off"].tolist() == [False] * 3


def _info_reference(path) -> dict:
    """Counts of the done partitions, read partition by partition (a fresh object)."""
    from ase.data import chemical_symbols

    store = open_store(path)
    done = [p for p in range(store.n_partitions) if store._is_done(p)]
    batches = [store.read_partition(p) for p in done]
    numbers = np.concatenate([b.numbers for b in batches]) if batches else np.zeros(0, int)
    return {
        "n_structures": sum(b.n_structures for b in batches),
        "n_atoms": sum(b.n_atoms for b in batches),
        "elements": [chemical_symbols[z] for z in np.unique(numbers)],
        "partitions_done": len(done),
        "complete": len(done) == store.n_partitions,
    }


def test_info_counts_the_done_partitions_also_after_they_change(tmp_path):
    """Store.info (each per-partition array read once) against the done partitions read
    one by one: skipped structures, an incomplete store, none done, and an object that
    counted its structures before another one cleared or marked a partition."""
    h2 = "begin\natom 0 0 0 H 0 0 0 0 0\natom 0 0 0.7 H 0 0 0 0 0\nenergy -1\nend\n"
    ho = "begin\natom 0 0 0 H 0 0 0 0 0\natom 0 0 0.9 O 0 0 0 0 0\nenergy -2\nend\n"
    _ingested_with_skips(tmp_path, middle=h2 * 2 + ho)
    watching = open_store(tmp_path / "s.zarr")
    assert watching.n_structures == 7  # counted (and cached) while all are done
    writable = open_store(tmp_path / "s.zarr", mode="r+")
    last = writable.n_partitions - 1
    with_o = next(p for p in range(last + 1) if 8 in writable.read_partition(p).numbers)
    steps = [[last], [with_o, last], list(range(last + 1)), []]  # cleared at each step
    for cleared in steps:
        for p in range(last + 1):
            (writable.clear_done if p in cleared else writable.mark_done)(p)
        want = _info_reference(tmp_path / "s.zarr")
        for store in (open_store(tmp_path / "s.zarr"), watching):
            info = store.info()
            assert {k: info[k] for k in want} == want, (cleared, store is watching)
            assert info["n_skipped"] == 2 and info["partitions_total"] == last + 1


def test_a_complete_store_records_what_info_sums_and_info_reads_it(tmp_path, monkeypatch):
    """``info`` read four chunks and a group document per partition; once a store is
    complete they are summed once into the root attribute ``summary``, and ``info`` of a
    complete store reads that, the done markers and the groups that skipped structures."""
    from dparallel.store import _opened, _reads

    store = open_store(_ingested_with_skips(tmp_path))
    skipping = sorted({store.partition_of(3), store.partition_of(8)})
    assert store.attrs["summary"] == {
        "partitions": store.n_partitions, "n_structures": 8, "n_atoms": 16, "elements": [1],
        "skipped_partitions": skipping,
    }  # fmt: skip
    read: list[str] = []
    for module in (_opened, _reads):
        original = module.read_keys
        monkeypatch.setattr(
            module, "read_keys", lambda s, keys, f=original: read.extend(keys) or f(s, keys)
        )
    info = store.info()
    monkeypatch.undo()
    groups = [f"parts/{p}/zarr.json" for p in skipping]
    dones = [f"partitions/done/c.{p}" for p in range(store.n_partitions)]
    assert sorted(read) == sorted(dones + groups)
    # a store of an earlier version (no summary) sums its partitions: the same answer
    meta = dict(store.attrs)
    del meta["summary"]
    zarr.open_group(str(tmp_path / "s.zarr"), mode="r+").attrs["dparallel"] = meta
    assert open_store(tmp_path / "s.zarr").info() == info
    assert info["n_structures"] == 8 and [r["index"] for r in info["skipped"]] == [3, 8]


def test_a_full_disk_under_the_root_attributes_names_the_store_and_keeps_them(xyz, tmpfs):
    """The client's summaries (featurize's statistics, the summary that ends a run) on a
    real full disk: zarr's bare "[Errno 28] No space left on device", naming no file, was
    the whole CLI line; now one DiskFullError names the store's root document, which still
    holds what it held."""
    disk = tmpfs("2m")
    ingest(xyz, disk / "s.zarr", IngestOptions(partition_atoms=40))
    store = open_store(disk / "s.zarr", mode="r+")
    before = dict(store.attrs)
    tmpfs.fill(disk)
    from dparallel.errors import DiskFullError

    with pytest.raises(DiskFullError) as info:
        store.update_attrs({"statistics": {"x": list(range(5000))}})
    assert str(info.value).startswith(f"{disk / 's.zarr' / 'zarr.json'}: no space left")
    (disk / "filler").unlink()
    assert dict(open_store(disk / "s.zarr").attrs) == before


@pytest.mark.parametrize("aside", [False, True])
def test_a_full_disk_while_the_layout_is_made_names_the_store(tmp_path, xyz, monkeypatch, aside):
    """zarr's own writes of the store's layout (its zarr.json documents) on a full disk
    came out as a bare ``[Errno 28] No space left on device`` naming no file (the CLI
    line: "No space left on device; free some space …"); now one DiskFullError names the
    store, and nothing half-made is left beside it."""
    import errno

    import zarr.storage._local as zarr_local

    from dparallel.errors import DiskFullError

    calls = []
    put = zarr_local._put

    def full_after_some(path, value, *args, **kwargs):
        calls.append(path)
        if len(calls) > 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        return put(path, value, *args, **kwargs)

    monkeypatch.setattr(zarr_local, "_put", full_after_some)
    with pytest.raises(DiskFullError) as info:
        _new(tmp_path, open_source(xyz), aside=aside)
    store = tmp_path / "s.zarr"
    assert str(info.value).startswith(f"{store}: no space left on the device")
    assert "free some space and rerun the same command" in str(info.value)
    assert info.value.errno == errno.ENOSPC and info.value.path == str(store)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("s.zarr")]
