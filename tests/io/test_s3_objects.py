"""What a location at ``s3://`` does through obstore (dparallel.io._s3_objects), checked
through s3fs, a client independent of dparallel's, against two S3 servers: moto's, and
SeaweedFS (a storage server with folders of its own) where its ``weed`` is installed;
and what ``az://`` relies on in Azure's answers, against Azurite where it is installed."""

from __future__ import annotations

import gzip
import io
import re
import time

import pytest
from s3server import filesystem, point_at_nothing, quick_retries, s3_server

from dparallel.io._text import open_stream
from dparallel.io.location import READ_BLOCK, LocationError, as_location

pytest.importorskip("obstore")


@pytest.fixture(scope="module", params=["moto", "seaweedfs"])
def s3(request):
    with s3_server(("dparallel-test",), kind=request.param) as endpoint:
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


def test_a_bucket_is_no_file_and_is_never_deleted(base):
    _put(f"{base}/a.txt", b"1")
    bucket = as_location("s3://dparallel-test")
    assert not bucket.is_file() and bucket.exists()
    assert base.rsplit("/", 1)[-1] in bucket.names()
    with pytest.raises(IsADirectoryError, match=r"s3://dparallel-test: refusing"):
        bucket.remove(recursive=True)
    assert as_location(f"{base}/a.txt").is_file()


def test_a_missing_bucket_holds_nothing(s3):
    nowhere = as_location("s3://no-such-bucket-here/prefix")
    assert not nowhere.exists()
    assert nowhere.names() == []
    with pytest.raises(FileNotFoundError, match=r"^s3://no-such-bucket-here/prefix: "):
        nowhere.info()
    from dparallel.store import _objects

    with pytest.raises(OSError, match=r"s3://no-such-bucket-here/prefix/dparallel\.lease: ") as e:
        _objects.put_if_absent(nowhere.child("dparallel.lease"), b"{}")
    # the server's own words: moto's NoSuchBucket, SeaweedFS's AccessDenied
    assert re.search(r"(NoSuchBucket|AccessDenied): [^:]+$", str(e.value)), str(e.value)
    assert "<?xml" not in str(e.value) and "\n" not in str(e.value)


def test_no_credentials_anywhere_is_said_in_one_line(s3, monkeypatch, tmp_path):
    """Nothing names a key: obstore's chain ends at the instance metadata service, whose
    failure reached the user as "PUT http://169.254.169.254/latest/api/token 403"; here
    the service is a closed port on loopback (``AWS_METADATA_ENDPOINT``), no wait."""
    from dparallel.io import _s3

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", "http://127.0.0.1:9")  # refused at once
    quick_retries(monkeypatch)
    _s3.clear_clients()
    try:
        with pytest.raises(OSError, match=r"no S3 credentials found: set AWS_ACCESS_KEY_ID") as e:
            as_location("s3://dparallel-test/x").child("k").info()
        assert "\n" not in str(e.value)
    finally:
        _s3.clear_clients()


def test_a_folder_marker_is_not_a_name(base):
    """Consoles make a folder as an empty object ``folder/``: it is the folder, not a name
    in it."""
    import boto3

    bucket, key = base.removeprefix("s3://").split("/", 1)
    boto3.client("s3").put_object(Bucket=bucket, Key=f"{key}/folder/", Body=b"")
    _put(f"{base}/folder/x.txt", b"1")
    assert as_location(base).names() == ["folder"]
    assert as_location(f"{base}/folder").names() == ["x.txt"]


@pytest.mark.slow
def test_a_large_upload_and_a_removal_past_one_batch(base, tmp_path):
    """An upload in parts (12 MiB) arrives whole; a removal below a prefix of 1,005
    objects (two delete requests) leaves none."""
    local = tmp_path / "big.bin"
    local.write_bytes(bytes(range(256)) * (12 * 4096))
    as_location(f"{base}/big.bin").upload(local)
    fs, path = filesystem(f"{base}/big.bin")
    assert fs.cat_file(path) == local.read_bytes()
    fs.pipe({filesystem(f"{base}/many/{i:04d}")[1]: b"x" for i in range(1005)})
    as_location(f"{base}/many").remove(recursive=True)
    assert not as_location(f"{base}/many").exists()
    assert as_location(f"{base}/big.bin").is_file()


@pytest.mark.slow
def test_a_stalled_service_gives_up_on_a_lease_write_within_half_a_minute(monkeypatch):
    """A server that takes the connection and never answers: the lease's and pointer's
    writes give up (an ``OSError`` naming the object) well inside the lease's 60 s
    heartbeat timeout, where a data client would wait 10 minutes."""
    import socket
    import threading

    from dparallel.io import _s3
    from dparallel.store import _objects

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def hold() -> None:  # accept, read nothing back, never answer (bounded by the test)
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    point_at_nothing(monkeypatch)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
    _s3.clear_clients()
    where = as_location("s3://bucket/s.zarr/dparallel.lease")
    started = time.monotonic()
    try:
        with pytest.raises(OSError, match=r"^s3://bucket/s.zarr/dparallel.lease: "):
            _objects.put_if_absent(where, b"{}")
        assert time.monotonic() - started < 40
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()
        _s3.clear_clients()


@pytest.mark.parametrize("kind", ["moto", "azurite"])
@pytest.mark.parametrize("what", ["reset", "lost"])
def test_a_removal_whose_bulk_delete_connection_dropped_is_sent_again(what, kind):
    """S3's bulk delete is a POST, as is Azure's blob batch, which obstore does not resend
    when its connection drops (``lost``: after the service deleted): one reset failed the
    removal of an old generation, and so the run; deleting again is harmless, so it is
    sent again (on Azure, ``lost``: the resend refused for the keys gone, then each key
    deleted on its own, the missing ones ignored)."""
    from s3server import faulty_server

    planned = [what]
    part = {"moto": "delete", "azurite": "comp=batch"}[kind]

    def fault(method: str, path: str) -> str | None:
        return planned.pop() if planned and method == "POST" and part in path else None

    with faulty_server(kind, fault) as bucket:
        where = as_location(f"{bucket}/old")
        for name in ("a/1", "a/2", "b"):
            _put(f"{where}/{name}", b"x")
        where.remove(recursive=True)
        assert not planned
        assert where.names() == []


@pytest.mark.parametrize("kind", ["moto", "azurite"])
@pytest.mark.parametrize("what", ["lost", "after:503"])
def test_an_upload_whose_last_answer_was_lost_is_whole(what, kind, tmp_path):
    """An upload in parts (12 MiB) whose final request (S3's CompleteMultipartUpload,
    Azure's Put Block List) landed but its answer was lost, or a 503 came after it:
    obstore resends it, which Azure refuses (400 InvalidBlockList: the resend names as
    uncommitted the blocks the first send committed), so the file is sent again."""
    from s3server import faulty_server

    local = tmp_path / "big.bin"
    local.write_bytes(bytes(range(256)) * (12 * 4096))
    planned = [what]
    method, part = {"moto": ("POST", "uploadId="), "azurite": ("PUT", "comp=blocklist")}[kind]

    def fault(m: str, path: str) -> str | None:
        return planned.pop() if planned and m == method and part in path else None

    with faulty_server(kind, fault) as bucket:
        as_location(f"{bucket}/big.bin").upload(local)
        assert not planned
        fs, path = filesystem(f"{bucket}/big.bin")
        assert fs.cat_file(path) == local.read_bytes()


@pytest.fixture(scope="module")
def azurite():
    """Azurite's blob server; its container's URL."""
    with s3_server(("dparallel-test",), kind="azurite"):
        yield "az://dparallel-test"


def test_azures_answers_to_conditional_writes_are_refusals(azurite):
    """What the lease and the pointer rely on, as Azure (Azurite 3.35) answers it: a Put
    Blob with If-Match on a missing blob 412 (AWS: 404), with If-None-Match: * on an
    existing one 409 BlobAlreadyExists (S3: 412): obstore's precondition and
    already-exists errors, each a refused write (``None``). Its ETag (``"0x…"``, no MD5)
    is the one a read gives and If-Match takes, and changes with each write."""
    import obstore
    import obstore.exceptions as errors

    from dparallel.io import _s3_objects as objects

    where = as_location(f"{azurite}/conditions-{time.monotonic_ns()}")
    store, key = where.object_store(small=True)
    with pytest.raises(errors.PreconditionError, match="412"):
        obstore.put(store, key, b"x", mode={"e_tag": '"0x8DD0000000000"'}, use_multipart=False)
    assert objects.put(store, key, b"x", where, if_match='"0x8DD0000000000"') is None
    assert objects.get(store, key, where) is None
    first = objects.put(store, key, b"one", where, if_absent=True)
    assert first is not None and re.fullmatch(r'"0x[0-9A-F]+"', first)
    assert objects.get(store, key, where) == (b"one", first)
    with pytest.raises(errors.AlreadyExistsError, match="409"):
        obstore.put(store, key, b"x", mode="create", use_multipart=False)
    assert objects.put(store, key, b"two", where, if_absent=True) is None
    second = objects.put(store, key, b"two", where, if_match=first)
    assert second is not None and second != first
    assert objects.put(store, key, b"three", where, if_match=first) is None
    assert objects.get(store, key, where) == (b"two", second)


def test_deleting_missing_keys_on_azure_is_quiet(azurite):
    """Azure refuses to delete a missing blob (404 in its batch answer: obstore's
    ``FileNotFoundError``, and none of the later batches sent): a missing object, a
    prefix holding nothing, a store's missing key, and a removal whose listing names a
    key deleted meanwhile are all quiet, the other keys deleted."""
    import obstore
    from zarr.core.sync import sync

    from dparallel.io import _s3_objects as objects
    from dparallel.store._s3 import s3_zarr_store

    base = as_location(f"{azurite}/missing-{time.monotonic_ns()}")
    store, key = base.object_store()
    with pytest.raises(FileNotFoundError):
        obstore.delete(store, f"{key}/none")
    as_location(f"{base}/none").remove()
    as_location(f"{base}/none").remove(recursive=True)
    sync(s3_zarr_store(base, read_only=False).delete("c.0"))
    for name in ("a", "b", "c"):
        _put(f"{base}/{name}", b"x")
    objects._delete_many(store, [f"{key}/gone", f"{key}/a", f"{key}/b", f"{key}/c"])
    assert base.names() == []


@pytest.mark.slow
def test_a_listing_and_a_removal_past_azures_5000_keys_a_page(azurite):
    """Azure lists at most 5,000 blobs a page and batches at most 256 deletes: a prefix
    of 5,100 objects is listed whole (names, exists) and removed whole."""
    import asyncio

    import obstore

    base = as_location(f"{azurite}/many-{time.monotonic_ns()}")
    store, key = base.object_store()

    async def put_all() -> None:
        at_once = asyncio.Semaphore(64)

        async def one(i: int) -> None:
            async with at_once:
                await obstore.put_async(store, f"{key}/k{i:05d}", b"x")

        await asyncio.gather(*(one(i) for i in range(5100)))

    asyncio.run(put_all())
    assert base.names() == [f"k{i:05d}" for i in range(5100)]
    base.remove(recursive=True)
    assert not base.exists() and base.names() == []


@pytest.mark.parametrize(
    ("said", "refused"),
    [
        ("<Error><Code>NoSuchKey</Code><Message>gone</Message></Error>", True),
        ("<Error><Code>BlobNotFound</Code><Message>gone</Message></Error>", True),
        ("404 Not Found", True),  # no document (a proxy): the object is taken as gone
        ("<Error><Code>ContainerNotFound</Code><Message>no</Message></Error>", False),
        ("<Error><Code>NoSuchBucket</Code><Message>no</Message></Error>", False),
        ("<Error><Code>ResourceNotFound</Code><Message>no</Message></Error>", False),
    ],
)
def test_a_404_to_if_match_is_a_refusal_only_for_a_missing_object(monkeypatch, said, refused):
    """A 404 to a replace-if-unchanged write means the object is gone (it changed: a
    refusal); a missing bucket, container or account is an error, not a lost lease."""
    import obstore

    from dparallel.io import _s3_objects

    def missing(*args, **kwargs):
        raise FileNotFoundError(f"Generic error: 404: {said}")

    monkeypatch.setattr(obstore, "put", missing)
    if refused:
        assert _s3_objects.put(None, "k", b"x", "az://c/k", if_match='"e1"') is None
    else:
        with pytest.raises(FileNotFoundError, match="az://c/k"):
            _s3_objects.put(None, "k", b"x", "az://c/k", if_match='"e1"')
