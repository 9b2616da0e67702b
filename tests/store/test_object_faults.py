"""Faults of the S3 service under a store's conditional writes (moto behind a proxy on
127.0.0.1 that resets chosen connections): a write the service did but whose answer never
came is settled by reading the object back, never taken for another writer's."""

from __future__ import annotations

import contextlib
import json
import time
from typing import TYPE_CHECKING

import pytest
from s3server import SCHEMES, faulty_server, quick_retries, s3_server

from dparallel.io.location import as_location
from dparallel.store import StoreLease, _objects

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.integration


#: The servers each fault test runs against: moto's S3 and Azurite (Azure Blob Storage).
KINDS = ["moto", "azurite"]


@pytest.fixture(params=KINDS)
def served(request):
    """The server's kind, its bucket's URL behind a proxy, and the list of (method, key
    part, fault) still to inject, each once, on the first request that matches;
    ``"for:S:503"``: every matching request answered 503 for S seconds from the first."""
    planned: list[tuple[str, str, str]] = []
    bursts: dict[int, float] = {}

    def fault(method: str, path: str) -> str | None:
        for i, (m, part, what) in enumerate(planned):
            if m == method and part in path:
                if what.startswith("for:"):
                    _, seconds, status = what.split(":")
                    first = bursts.setdefault(id(planned[i]), time.monotonic())
                    if time.monotonic() - first < float(seconds):
                        return status
                    del planned[i]
                    return None
                del planned[i]
                return what
        return None

    with faulty_server(request.param, fault) as bucket:
        yield request.param, bucket, planned


@pytest.fixture
def faults(served) -> list[tuple[str, str, str]]:
    """The faults still to inject (:func:`served`)."""
    return served[2]


@pytest.fixture
def bucket(served) -> str:
    """The bucket's URL on the server behind the proxy: ``s3://…`` or ``az://…``."""
    return served[1]


#: What a store's delete request has in its path: S3's DeleteObjects (``?delete``),
#: Azure's blob batch (``comp=batch``); both POSTs, for one key too.
DELETE_PART = {"moto": "delete", "azurite": "comp=batch"}


@pytest.mark.parametrize("what", ["reset", "lost", "after:500", "after:503"])
def test_a_conditional_write_whose_answer_was_lost_is_settled(faults, bucket, what):
    """``after:5xx``: the service did the write, then a 5xx came (a gateway's, or a 500 of
    a request that had landed); obstore retries it itself and the retry is refused (412)
    by our own write: read back, the write is ours, not another writer's."""
    where = as_location(f"{bucket}/settled-{what}/obj")
    faults.append(("PUT", "/obj", what))
    first = _objects.put_if_absent(where, b"one")
    assert first is not None and _objects.get(where) == (b"one", first)
    faults.append(("PUT", "/obj", what))
    second = _objects.put_if_match(where, b"two", first)
    assert second is not None and _objects.get(where) == (b"two", second)
    faults.append(("PUT", "/obj", what))  # refused: another writer's object is there
    assert _objects.put_if_absent(where, b"three") is None
    faults.append(("PUT", "/obj", what))
    assert _objects.put_if_match(where, b"four", first) is None
    assert _objects.get(where) == (b"two", second)


@pytest.mark.parametrize("create", [True, False])
def test_a_first_send_landing_after_its_resend_is_still_the_writers(faults, bucket, create):
    """The first send's connection reset, the object read back unchanged, the write sent
    again; but the first send lands late, before the resend, which is then refused: the
    object holds the writer's bytes, so the write succeeded (it was told "refused")."""
    where = as_location(f"{bucket}/late-{create}/obj")
    etag = None if create else _objects.put_if_absent(where, b"one")
    faults.append(("PUT", "/obj", "late:0.3"))
    faults.append(("PUT", "/obj", "delay:1.0"))  # the resend
    if create:
        got = _objects.put_if_absent(where, b"two")
    else:
        got = _objects.put_if_match(where, b"two", etag)
    assert not faults
    assert got is not None and _objects.get(where) == (b"two", got)


def test_a_replacement_of_a_deleted_object_is_refused_as_on_aws(faults, bucket):
    """AWS S3 answers a PUT with If-Match on an object that is gone 404 (moto and Azure,
    Azurite too, 412): the object changed, so the write is refused (``None``, as on
    ``memory://``), and a heartbeat notices its deleted lease. obstore takes a 404 for a
    failed condition on S3 only; on Azure it was a ``FileNotFoundError``, raised."""
    where = as_location(f"{bucket}/deleted/obj")
    etag = _objects.put_if_absent(where, b"one")
    assert etag is not None
    faults.append(("PUT", "/obj", "404"))
    assert _objects.put_if_match(where, b"two", etag) is None
    assert _objects.get(where) == (b"one", etag)


@pytest.mark.parametrize("what", ["lost", "after:503", "503"])
def test_a_heartbeat_whose_answer_was_lost_keeps_the_lease(faults, bucket, what):
    """The lease's taking and its first heartbeat each lose their answer, or get a 503
    after the service did the write (Azure's ServerBusy on az://), or a 503 before it
    (retried by obstore): the lease is kept, and released at the end."""
    lease = StoreLease(f"{bucket}/beat-{what[:5]}.zarr", command="test", timeout=1.2)
    faults.append(("PUT", "dparallel.lease", what))  # taking it
    lease.acquire()
    try:
        assert not faults
        faults.append(("PUT", "dparallel.lease", what))  # the first heartbeat's
        deadline = time.monotonic() + 10
        while faults and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.6)  # three more beats, each over the ETag the lost one made
        assert not faults
        lease.check()
        assert not lease.lost.is_set()
    finally:
        lease.release()
    record = json.loads(_objects.get(lease.path)[0])
    assert record["released"]


def test_a_holder_whose_heartbeats_fail_stops_once_it_could_be_taken_over(
    faults, bucket, monkeypatch
):
    """Every request for the lease fails (503, after obstore's retries): the holder keeps
    writing no longer than its lease's timeout, after which another run may take the store
    over; before, each failed heartbeat was tried again at the next beat, for ever, and
    the run went on writing beside the run that took the store over."""
    from dparallel.errors import StoreError

    quick_retries(monkeypatch)  # a heartbeat's request fails within ~0.5 s, not 3-14 s
    lease = StoreLease(f"{bucket}/unreachable.zarr", command="test", timeout=1.2)
    lease.acquire()
    try:
        faults.extend([("PUT", "dparallel.lease", "503"), ("GET", "dparallel.lease", "503")] * 200)
        started = time.monotonic()
        while not lease.lost.is_set() and time.monotonic() - started < 10:
            time.sleep(0.05)
        assert lease.lost.is_set()
        assert time.monotonic() - started < 1.2 + 2.0  # the timeout, a beat, a request
        faults.clear()
        with pytest.raises(StoreError) as info:
            lease.check()
        message = str(info.value)
        assert "no heartbeat could be written" in message and "503" in message
        assert str(lease.path) in message and "rerun the same command" in message
        holder = json.loads(_objects.get(lease.path)[0])
        assert holder["token"] == lease.token  # nobody took it: this run stopped itself
    finally:
        faults.clear()
        lease.release()


@pytest.mark.slow
def test_a_holder_whose_heartbeat_hangs_stops_when_it_could_be_taken_over(faults, bucket):
    """The service takes 20 s to answer the lease's requests (the lease client gives up
    after 15 s, then reads the object back): the run stops as its lease's timeout passes,
    the moment another run may take the store over, not once the requests have failed
    (~30 s later; with the 60-s default, both runs wrote for that long)."""
    from dparallel.errors import StoreError

    lease = StoreLease(f"{bucket}/slow.zarr", command="test", timeout=1.2)
    lease.acquire()
    try:
        faults.extend(
            [("PUT", "dparallel.lease", "delay:20"), ("GET", "dparallel.lease", "delay:20")] * 5
        )
        started = time.monotonic()
        while time.monotonic() - started < 10:
            try:
                lease.check()
            except StoreError as exc:
                message = str(exc)
                break
            time.sleep(0.05)
        else:
            pytest.fail("a run whose heartbeat hangs kept its lease past the timeout")
        assert time.monotonic() - started < 1.2 + 1.0
        assert "no heartbeat could be written" in message and "has not answered" in message
    finally:
        faults.clear()
        lease.release()


@pytest.mark.slow
def test_a_store_outlasts_seconds_of_503_slowdown(faults, bucket):
    """S3 throttling (503 SlowDown) for 4.5 s on a store's object: its write and its read
    wait it out (obstore's default backoff gave up after 10 retries within ~1.6 s, which
    failed the partition being written; now at least 5 s pass before a request fails)."""
    from zarr.core.buffer import cpu
    from zarr.core.sync import sync

    from dparallel.store._s3 import s3_zarr_store

    store = s3_zarr_store(as_location(f"{bucket}/throttled.zarr"), read_only=False)
    faults.append(("PUT", "/throttled.zarr/c.0", "for:4.5:503"))
    sync(store.set("c.0", cpu.Buffer.from_bytes(b"chunk")))
    assert not faults
    faults.append(("GET", "/throttled.zarr/c.0", "for:4.5:503"))
    assert sync(store.get("c.0", cpu.buffer_prototype)).to_bytes() == b"chunk"
    assert not faults


@pytest.mark.parametrize("what", ["reset", "lost"])
def test_a_delete_whose_connection_dropped_is_sent_again(served, what):
    """obstore deletes a store's key by a POST (S3's DeleteObjects, Azure's blob batch),
    which it does not resend where the connection dropped: a task deleting a chunk (a tag
    left all fill values, what a killed attempt left) failed its partition on one reset.
    ``lost``: the resend finds the key gone (Azure's batch refuses that: ignored)."""
    from zarr.core.buffer import cpu
    from zarr.core.sync import sync

    from dparallel.store._s3 import s3_zarr_store

    kind, bucket, faults = served
    store = s3_zarr_store(as_location(f"{bucket}/del-{what}.zarr"), read_only=False)
    for key in ("c.0", "a/c.0", "a/c.1"):
        sync(store.set(key, cpu.Buffer.from_bytes(b"chunk")))
    faults.append(("POST", DELETE_PART[kind], what))
    sync(store.delete("c.0"))
    faults.append(("POST", DELETE_PART[kind], what))
    sync(store.delete_dir("a"))
    assert not faults
    assert not any(sync(store.exists(key)) for key in ("c.0", "a/c.0", "a/c.1"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_pointer_to_a_deleted_generation_is_named(tmp_path, kind):
    """A store whose current generation was deleted behind dparallel's back was "no zarr
    store at URL"; the error says which generation the pointer names and that it is gone."""
    import ase.io
    import numpy as np

    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.errors import StoreError
    from dparallel.io.synthetic import random_structures
    from dparallel.store import open_store
    from dparallel.store._generations import POINTER_KEY
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    frames = random_structures(
        4, np.random.default_rng(1), min_atoms=3, max_atoms=6, elements=(1, 8)
    )
    ase.io.write(tmp_path / "data.xyz", frames, format="extxyz")
    acsf = ACSF.uniform(["H", "O"], r_cut=3.0, radial=[(0.5, 0.0)], narrow=[], wide=[])
    url = f"{SCHEMES[kind]}://dparallel-test/lost.zarr"
    with s3_server(("dparallel-test",), kind=kind):
        featurize_in_process(
            tmp_path / "data.xyz", url, DescriptorSet(acsf=acsf), FeaturizeOptions()
        )
        pointer = as_location(f"{url}/{POINTER_KEY}")
        data, _ = _objects.get(pointer)
        current = json.loads(data)["current"]
        as_location(f"{url}/{current}").remove(recursive=True)
        with pytest.raises(StoreError) as info:
            open_store(url)
    message = str(info.value)
    assert f"names the generation {current}, which holds no store" in message
    assert message.startswith(url) and "\n" not in message


@pytest.mark.slow
def test_a_chunk_that_cannot_be_put_fails_its_partition_and_a_rerun_completes_it(
    faults, bucket, monkeypatch, tmp_path
):
    """Every PUT below partition 1's folder answered 500 (after obstore's retries): that
    partition fails, named with the store, and is not marked done; the others are kept;
    the same call, once the service takes the writes, computes only it, to a store equal
    to the local one bit for bit."""
    from hco import hco_descriptors, write_hco_structures

    from dparallel.errors import PartitionFailedError
    from dparallel.store import open_store
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    quick_retries(monkeypatch)  # a request given up within ~2 s, not 5-32 s
    data = write_hco_structures(tmp_path / "data.xyz", seed=5)
    options = FeaturizeOptions(partition_atoms=30)
    url = f"{bucket}/failing-chunk/s.zarr"
    faults.extend([("PUT", "/parts/1/", "500")] * 1000)
    with pytest.raises(PartitionFailedError) as info:
        featurize_in_process(data, url, hco_descriptors(), options)
    first, *rest = str(info.value).splitlines()
    assert first.endswith("a rerun computes only the rest.") and len(rest) == 1
    assert rest[0].startswith("partition 1 ") and f"OSError: {url}/g-" in rest[0]
    assert "500" in rest[0]
    partial = open_store(url, mode="r")
    assert 1 not in partial.done_partitions().tolist()
    assert len(partial.done_partitions()) == partial.n_partitions - 1
    faults.clear()
    remote = featurize_in_process(data, url, hco_descriptors(), options)
    _equal_bitwise(
        featurize_in_process(data, tmp_path / "s.zarr", hco_descriptors(), options), remote
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_a_store_written_and_read_through_one_fault_in_five_equals_the_local_one(
    monkeypatch, tmp_path, kind
):
    """Every fifth request of each method fails, in turn: answered 503, reset before it
    reaches the service, reset after the service did it, answered 503 after it did it;
    and every other send of a conditional write (lease, pointer) loses its answer or
    gets a 503 after the service did it (before, the run refused itself: "being written
    by featurize (in process) (pid <its own>"). featurize finishes, and the store it
    wrote, read back through the same faults, equals the local one bit for bit."""
    import collections
    import itertools

    from hco import hco_descriptors, write_hco_structures

    from dparallel.store import open_store
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    kinds = itertools.cycle(["503", "reset", "lost", "after:503"])
    conditional = itertools.cycle(["after:503", None, "lost", None])
    seen: collections.Counter[str] = collections.Counter()
    injected: list[str] = []

    def fault(method: str, path: str) -> str | None:
        if method == "PUT" and path.endswith(("/dparallel.lease", "/dparallel.json")):
            return next(conditional)
        seen[method] += 1
        if seen[method] % 5:
            return None
        injected.append(next(kinds))
        return injected[-1]

    data = write_hco_structures(tmp_path / "data.xyz", seed=5)
    options = FeaturizeOptions(partition_atoms=30)
    local = featurize_in_process(data, tmp_path / "s.zarr", hco_descriptors(), options)
    quick_retries(monkeypatch)  # the faults, not the waits between retries
    with faulty_server(kind, fault) as bucket:
        url = f"{bucket}/one-in-five/s.zarr"
        featurize_in_process(data, url, hco_descriptors(), options)
        _equal_bitwise(local, open_store(url))
    assert len(injected) > 100 and seen["POST"] > 0


def _equal_bitwise(local, remote) -> None:  # noqa: ANN001 - two Stores
    """Every array of the two stores equal, bit for bit."""
    import zarr

    a = zarr.open_group(store=local.zarr_store, mode="r")
    b = zarr.open_group(store=remote.zarr_store, mode="r")
    names = sorted(k for k, v in a.members(max_depth=None) if isinstance(v, zarr.Array))
    assert names == sorted(k for k, v in b.members(max_depth=None) if isinstance(v, zarr.Array))
    for name in names:
        x, y = a[name][...], b[name][...]
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name


def test_a_lease_that_cannot_be_taken_is_one_store_error_line_with_advice(
    faults, bucket, monkeypatch, tmp_path, capsys
):
    """Every PUT of the lease answered 503 (after the client's retries): ``dparallel
    featurize`` ends with one ``StoreError`` line naming the store, that taking the lease
    failed, the service's answer and what to do, exit code 2 (before: the raw ``OSError``
    of the lease object, without advice)."""
    import yaml

    from dparallel.cli.main import main
    from dparallel.datasets import write_emt_cu
    from dparallel.errors import StoreError

    quick_retries(monkeypatch)
    url = f"{bucket}/untaken.zarr"
    faults.extend([("PUT", "dparallel.lease", "503")] * 100)
    with pytest.raises(StoreError) as info:
        StoreLease(url, command="test").acquire()
    message = str(info.value)
    assert message.startswith(f"{url}: taking the lease failed (") and "503" in message
    assert "\n" not in message  # Azure's error message has three lines
    assert message.endswith(
        "rerun the same command once the store's service answers (done work is kept)"
    )
    source = write_emt_cu(tmp_path / "cu.extxyz", n_structures=4, seed=5)
    (tmp_path / "d.yaml").write_text(
        yaml.safe_dump({"acsf": {"elements": ["Cu"], "r_cut": 4.5, "radial": [[0.5, 0.0]]}})
    )
    argv = ["featurize", str(source), "-o", url, "--descriptors", str(tmp_path / "d.yaml"),
            "--local", "1", "--partition-atoms", "60"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err  # and moto's request lines, in this process too
    # (a warning such as Dask's for a dashboard port in use may come before the error)
    lines = [line for line in err.splitlines() if line.startswith("dparallel ")]
    lines = [line for line in lines if not line.startswith("dparallel featurize: warning:")]
    assert len(lines) == 1 and "Traceback" not in err, lines
    assert lines[0].startswith(f"dparallel featurize: error: {url}: taking the lease failed (")
    assert "503" in lines[0] and "rerun the same command" in lines[0]


def test_a_pointer_that_cannot_be_written_is_one_store_error_line_with_advice(
    faults, bucket, monkeypatch
):
    """Every PUT of the pointer answered 503: a ``StoreError`` naming the store, that
    publishing the pointer failed, the answer and the advice (before: a raw ``OSError``)."""
    from dparallel.errors import StoreError
    from dparallel.store._generations import write_pointer

    quick_retries(monkeypatch)
    url = as_location(f"{bucket}/unpublished.zarr")
    faults.extend([("PUT", "dparallel.json", "503")] * 100)
    with pytest.raises(StoreError) as info:
        write_pointer(url, {"current": "g-1", "building": None}, None)
    message = str(info.value)
    assert message.startswith(f"{url}: publishing the pointer failed (") and "503" in message
    assert "\n" not in message
    assert "rerun the same command once the store's service answers" in message


def test_a_run_stopped_by_a_late_heartbeat_releases_its_lease_once_it_lands(faults, bucket):
    """A heartbeat answered only after 3 s: the run stops as its lease's timeout (1.2 s)
    passes; its release waits for that heartbeat, which lands, and then releases the lease
    (ETag match: still its own version), so the next run takes the store at once (before:
    the lease was left holding that fresh heartbeat, and the next run waited a timeout)."""
    url = f"{bucket}/late-beat.zarr"
    with _stopped_by_a_late_heartbeat(faults, url) as lease:
        pass
    record = json.loads(_objects.get(lease.path)[0])
    assert record["token"] == lease.token and record["released"]
    with StoreLease(url, command="next", timeout=60):  # not refused as busy
        pass


def test_a_run_stopped_by_a_late_heartbeat_leaves_a_lease_taken_over_alone(faults, bucket):
    """As above, but another run took the store over before the late heartbeat came (which
    is then refused): the stopping run's release leaves that run's lease as it is."""
    with _stopped_by_a_late_heartbeat(faults, f"{bucket}/late-taken.zarr") as lease:
        _, etag = _objects.get(lease.path)
        other = json.dumps({"token": "other", "heartbeat": time.time()}).encode()
        assert _objects.put_if_match(lease.path, other, etag) is not None
    assert _objects.get(lease.path)[0] == other


@contextlib.contextmanager
def _stopped_by_a_late_heartbeat(faults, url: str) -> Iterator[StoreLease]:  # noqa: ANN001
    """A lease (1.2-s timeout) whose next heartbeat is answered after 3 s, yielded once
    ``check()`` stopped its run (within 5 s), as a run calls it; released on leaving."""
    from dparallel.errors import StoreError

    lease = StoreLease(url, command="test", timeout=1.2)
    lease.acquire()
    try:
        faults.append(("PUT", "dparallel.lease", "delay:3"))
        started = time.monotonic()
        with pytest.raises(StoreError, match="no heartbeat could be written"):
            while time.monotonic() - started < 5:
                lease.check()
                time.sleep(0.05)
        yield lease
    finally:
        lease.release()
    assert not faults  # the slow heartbeat was sent
