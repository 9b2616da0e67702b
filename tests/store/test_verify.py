"""``dparallel info --verify``: every chunk a done partition should have is read; a missing
or unreadable one is named by partition and array, and the command exits 1. Locally and
on S3 (moto)."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace

import pytest
import zarr
from hco import hco_descriptors, write_hco_structures
from same_arrays import assert_same_arrays

from dparallel.cli.main import main
from dparallel.errors import StoreError
from dparallel.store import open_store
from dparallel.workflow import featurize as featurize_mod
from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process
from dparallel.workflow.ingest import IngestOptions, ingest

_dset = hco_descriptors


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_hco_structures(tmp_path_factory.mktemp("verify") / "data.xyz", seed=7)


@pytest.fixture(scope="module")
def pristine(data):
    store = featurize_in_process(
        data, data.parent / "f.zarr", _dset(), FeaturizeOptions(partition_atoms=30)
    )
    assert store.is_complete and store.n_partitions >= 3
    return data.parent / "f.zarr"


@pytest.fixture
def featurized(pristine, tmp_path):
    """A copy of the featurized store, to damage."""
    return shutil.copytree(pristine, tmp_path / "f.zarr")


def _chunk(array_dir, *coords):
    return array_dir / zarr.open_array(str(array_dir), mode="r").metadata.encode_chunk_key(coords)


def _as_an_older_version(path, attribute):
    """The store at ``path`` as a version before ``attribute`` was recorded."""
    meta = dict(open_store(path).attrs)
    del meta[attribute]
    zarr.open_group(str(path), mode="r+").attrs["dparallel"] = meta


def _verify(path, capsys, *extra):
    code = main(["info", str(path), "--verify", *extra])
    return code, capsys.readouterr().out


def test_a_whole_store_verifies(featurized, capsys):
    code, out = _verify(featurized, capsys)
    assert code == 0
    line = out.splitlines()[-1]
    assert line.startswith("verify       ok: ") and "all present and readable" in line
    checked = open_store(featurized).verify()
    # every partition's structure rows, its counts and its feature arrays were read
    assert checked.partitions == open_store(featurized).n_partitions
    assert checked.chunks > 13 * checked.partitions


def test_a_deleted_feature_chunk_is_named_by_partition_and_array(featurized, capsys):
    values = featurized / "parts" / "1" / "features" / "acsf" / "H" / "values"
    _chunk(values, 0, 0).unlink()
    assert main(["info", str(featurized)]) == 0  # info alone reads only the counts
    assert "(complete)" in capsys.readouterr().out
    code, out = _verify(featurized, capsys)
    assert code == 1
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("verify"))
    assert lines[start].startswith("verify       FAILED: 1 missing, 0 unreadable, in 1 of ")
    assert lines[start + 1 :] == [
        "  partition 1: parts/1/features/acsf/H/values: chunk c.0.0 missing"
    ]
    code, out = _verify(featurized, capsys, "--json")
    assert code == 1
    report = json.loads(out)["verify"]
    assert report["ok"] is False and report["problems"] == [
        {"partition": 1, "array": "parts/1/features/acsf/H/values", "chunk": "c.0.0",
         "problem": "missing"}
    ]  # fmt: skip


def test_every_kind_of_damage_is_listed_in_one_summary(featurized, capsys):
    _chunk(featurized / "structures" / "positions", 2, 0).unlink()
    torn = _chunk(featurized / "parts" / "0" / "features" / "acsf" / "C" / "values", 0, 0)
    torn.write_bytes(torn.read_bytes()[:20])
    shutil.rmtree(featurized / "parts" / "2" / "features" / "acsf" / "O")
    checked = open_store(featurized).verify()
    found = {(p.partition, p.array, p.chunk): p.problem for p in checked.problems}
    assert found.pop((2, "structures/positions", "c.2.0")) == "missing"
    assert found.pop((0, "parts/0/features/acsf/C/values", "c.0.0")).startswith(
        "unreadable: ValueError: a Blosc frame of 20 bytes"
    )
    gone = {a for (p, a, c), what in found.items() if p == 2 and c is None}
    assert "parts/2/features/acsf/O/values" in gone  # the partition has O atoms
    assert "parts/2/features/acsf/O/d/H/dG_dr_split" in gone
    assert set(found.values()) == {"missing (no zarr.json)"}
    code, out = _verify(featurized, capsys)
    assert code == 1 and "in 2 of " in out  # partitions 0 and 2


def test_the_shared_arrays_are_read_a_block_of_chunks_at_a_time(featurized, monkeypatch):
    # all of an array's chunks were read at once: its whole bytes held (at 10^6 small
    # structures ~100 MB of positions); a block at a time, damage past the first still found
    from dparallel.store import _verify

    n_parts = open_store(featurized).n_partitions
    _chunk(featurized / "structures" / "positions", n_parts - 1, 0).unlink()
    shared: list[int] = []  # keys per read of a shared array (not below parts/<p>/)
    real = _verify.read_keys

    def read_keys(base, keys):
        if keys and "parts/" not in keys[0] and not keys[0].endswith("zarr.json"):
            shared.append(len(keys))
        return real(base, keys)

    monkeypatch.setattr(_verify, "BLOCK", 2, raising=False)
    monkeypatch.setattr(_verify, "read_keys", read_keys)
    checked = open_store(featurized).verify()
    assert [(p.partition, p.array) for p in checked.problems] == [
        (n_parts - 1, "structures/positions")
    ]
    assert n_parts > 2 and shared and max(shared) == 2


def test_a_store_of_an_older_version_reports_no_missing_chunk(featurized):
    """Before ``every_chunk_written`` an all-fill chunk was left out: a missing one is no
    proof of damage, so only unreadable ones are reported, and the summary says so."""
    _as_an_older_version(featurized, "every_chunk_written")
    _chunk(featurized / "structures" / "energy", 1).unlink()
    checked = open_store(featurized).verify()
    assert checked.ok and not checked.missing_checked


def test_an_ingested_store_verifies_its_structures(data, tmp_path, capsys):
    ingest(data, tmp_path / "s.zarr", IngestOptions(partition_atoms=30))
    assert _verify(tmp_path / "s.zarr", capsys)[0] == 0
    _chunk(tmp_path / "s.zarr" / "partitions" / "n_atoms", 1).unlink()
    assert main(["info", str(tmp_path / "s.zarr")]) == 0  # its counts: the summary
    code, out = _verify(tmp_path / "s.zarr", capsys)
    assert code == 1
    assert out.splitlines()[-1] == "  partition 1: partitions/n_atoms: chunk c.1 missing"
    assert out.splitlines()[-2].endswith(  # what made it, and that it mends this
        "damaged: rerun the ingest that made it with --repair to compute only the damaged "
        "partitions again"
    )
    # a store without the summary (an earlier version's): info needs that chunk
    _as_an_older_version(tmp_path / "s.zarr", "summary")
    assert main(["info", str(tmp_path / "s.zarr")]) == 2
    assert "partitions/n_atoms: chunk c.1 of a done partition is missing" in capsys.readouterr().err
    code, out = _verify(tmp_path / "s.zarr", capsys)  # says so, and what else is gone
    assert code == 1
    assert out.splitlines()[0].startswith("info         cannot be summarised: ")
    assert out.splitlines()[-1] == "  partition 1: partitions/n_atoms: chunk c.1 missing"


@pytest.mark.integration
def test_verify_on_s3_names_a_deleted_object(data, capsys):
    from s3server import s3_server
    from zarr.core.sync import sync

    from dparallel.store import _s3

    with s3_server(("dparallel-test",), kind="moto"):
        url = f"s3://dparallel-test/verify-{time.monotonic_ns()}/f.zarr"
        featurize_in_process(data, url, _dset(), FeaturizeOptions(partition_atoms=30))
        assert _verify(url, capsys)[0] == 0
        generation = open_store(url).root
        writable = _s3.s3_zarr_store(generation, read_only=False)
        sync(writable.delete("parts/1/features/acsf/H/values/c.0.0"))
        sync(writable.delete("structures/forces/c.0.0"))
        code, out = _verify(url, capsys)
    assert code == 1
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("verify"))
    assert lines[start].startswith("verify       FAILED: 2 missing, 0 unreadable, in 2 of ")
    assert lines[start + 1 :] == [
        "  partition 0: structures/forces: chunk c.0.0 missing",
        "  partition 1: parts/1/features/acsf/H/values: chunk c.0.0 missing",
    ]


def test_a_torn_group_document_is_listed_not_a_traceback(data, tmp_path, capsys):
    """The ``atoms`` group's zarr.json torn (not JSON): ``info --verify`` died with zarr's
    JSONDecodeError traceback while listing the group's arrays; it lists the group as
    unreadable and exits 1 (found by fuzzing the store's files)."""
    ingest(data, tmp_path / "s.zarr", IngestOptions(partition_atoms=30))
    (tmp_path / "s.zarr" / "atoms" / "zarr.json").write_text('{"zarr_format": 3, "node_')
    code, out = _verify(tmp_path / "s.zarr", capsys)
    assert code == 1
    assert out.splitlines()[-1].startswith("  store: atoms: group unreadable: JSONDecodeError")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e308])
def test_a_feature_value_that_is_not_finite_is_listed(featurized, capsys, value):
    """NaN, ±inf or 1e308 (beyond float32: it overflows) written into a feature chunk
    decoded fine, so verify said ok and training stopped later with "the model diverged"
    (found by fuzzing the store's files): it is listed by partition, array and chunk."""
    values = zarr.open_array(
        str(featurized / "parts" / "1" / "features" / "acsf" / "H" / "values"), mode="r+"
    )
    damaged = values[...]
    damaged[0, 1] = value
    values[...] = damaged
    code, out = _verify(featurized, capsys)
    assert code == 1
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("verify"))
    assert lines[start].startswith("verify       FAILED: 0 missing, 0 unreadable, 1 not finite")
    assert lines[start].endswith("rerun the featurize that made it with --repair to compute "
                                 "only the damaged partitions again")  # fmt: skip
    assert lines[start + 1 :] == [
        "  partition 1: parts/1/features/acsf/H/values: chunk c.0.0 not finite: 1 values not "
        "finite or beyond ±3.4e+38"
    ]


_GROUPS = [
    "structures", "partitions", "atoms", "parts", "parts/1", "parts/1/features",
    "parts/1/features/acsf", "parts/1/features/acsf/H", "parts/1/features/acsf/H/d",
    "parts/1/features/acsf/H/d/O",
]  # fmt: skip


@pytest.mark.parametrize("how", ["deleted", "torn", "an array's"])
@pytest.mark.parametrize("group", _GROUPS)
def test_a_lost_group_document_is_listed(featurized, capsys, group, how):
    """A group's zarr.json deleted, cut short or replaced: dparallel reads through it (zarr
    finds the arrays below), so verify said ok, yet ``xarray.open_zarr(STORE,
    group="structures")`` and other zarr readers cannot open the store (found by fuzzing
    the store's files). Every group document of the layout is checked and listed."""
    document = featurized / group / "zarr.json"
    if how == "deleted":
        document.unlink()
    elif how == "torn":
        document.write_bytes(document.read_bytes()[:9])
    else:
        document.write_bytes((featurized / "structures" / "energy" / "zarr.json").read_bytes())
    code, out = _verify(featurized, capsys)
    assert code == 1
    where = "store" if group.count("/") < 1 else "partition 1"
    problem = {
        "deleted": "missing (no zarr.json)",
        "torn": "unreadable: JSONDecodeError",
        "an array's": "unreadable: not a group's zarr.json (node_type 'array')",
    }[how]
    assert any(line.startswith(f"  {where}: {group}: group {problem}") for line in out.splitlines())


def test_a_store_without_its_structures_group_document_is_not_one_xarray_opens(featurized):
    """Why a lost group document is damage: dparallel reads the store, xarray does not."""
    xarray = pytest.importorskip("xarray")
    xarray.open_zarr(featurized, group="structures", consolidated=False)
    (featurized / "structures" / "zarr.json").unlink()
    open_store(featurized).read_partition(0)
    with pytest.raises(FileNotFoundError, match="No group found"):  # zarr's GroupNotFoundError
        xarray.open_zarr(featurized, group="structures", consolidated=False)
    assert any(
        p.array == "structures" and p.group for p in open_store(featurized).verify().problems
    )


def test_repair_computes_the_damaged_partitions_again_and_only_them(
    featurized, pristine, data, capsys, monkeypatch
):
    """A done partition's chunk deleted, cut short (a write killed on a filesystem without
    atomic renames, a disk) or holding a NaN: ``info --verify`` listed it and said to
    featurize the whole store again with --overwrite, and a rerun of the same featurize
    kept it as done. ``--repair`` verifies first and computes those partitions again, to
    the arrays the undamaged store holds."""
    _chunk(featurized / "structures" / "positions", 2, 0).unlink()
    torn = _chunk(featurized / "parts" / "0" / "features" / "acsf" / "C" / "values", 0, 0)
    torn.write_bytes(torn.read_bytes()[:20])
    values = zarr.open_array(
        str(featurized / "parts" / "1" / "features" / "acsf" / "H" / "values"), mode="r+"
    )
    values[0, 1] = float("nan")
    options = FeaturizeOptions(partition_atoms=30)
    featurize_in_process(data, featurized, _dset(), options)  # a plain rerun: kept as done
    assert [p.partition for p in open_store(featurized).verify().problems] == [0, 1, 2]
    assert _verify(featurized, capsys)[1].count("with --repair to compute only the damaged") == 1

    computed: list[int] = []
    real = featurize_mod.featurize_partition
    monkeypatch.setattr(
        featurize_mod,
        "featurize_partition",
        lambda source, store, p, d: computed.append(p) or real(source, store, p, d),
    )
    with pytest.warns(UserWarning, match=r"not finite \(3\): 0, 1, 2$"):
        featurize_in_process(data, featurized, _dset(), replace(options, repair=True))
    assert computed == [0, 1, 2]
    assert open_store(featurized).verify().ok
    assert_same_arrays(pristine, featurized)


def test_repair_refuses_a_damage_no_partition_owns(featurized, data):
    """A layout group's document (``structures/zarr.json``) is no partition's to write
    again: only making the store again mends it, and the error says so."""
    (featurized / "structures" / "zarr.json").unlink()
    options = FeaturizeOptions(partition_atoms=30, repair=True)
    with pytest.raises(StoreError, match=r"store: structures: group missing .*which no partition "
                       r"owns.*featurize the store again with --overwrite"):  # fmt: skip
        featurize_in_process(data, featurized, _dset(), options)


def test_an_ingest_with_repair_writes_a_lost_chunk_again(data, tmp_path, capsys):
    ingest(data, tmp_path / "s.zarr", IngestOptions(partition_atoms=30))
    before = open_store(tmp_path / "s.zarr").read_structures()
    _chunk(tmp_path / "s.zarr" / "structures" / "forces", 1, 0).write_bytes(b"\0" * 7)
    argv = ["ingest", str(data), "-o", str(tmp_path / "s.zarr"), "--partition-atoms", "30"]
    assert main([*argv, "--repair", "-q"]) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "unreadable or not finite (1): 1\n" in err
    store = open_store(tmp_path / "s.zarr")
    assert store.verify().ok and store.read_structures().equals(before)
