"""The zarr store of a dparallel store on S3 (obstore): one PUT per object, an option it
cannot honour refused as a store error."""

from __future__ import annotations

import logging
import re
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from dparallel.errors import StoreError
from dparallel.io.location import Location
from dparallel.store import _s3

pytest.importorskip("obstore")


def test_an_option_obstore_cannot_honour_is_refused_by_name():
    where = Location("s3://bucket/feats.zarr", (("use_ssl", False),))
    with pytest.raises(StoreError, match=r"storage option 'use_ssl' is not understood"):
        _s3.s3_zarr_store(where, read_only=True)


@pytest.mark.integration
def test_a_large_object_goes_in_one_put(caplog):
    """obstore's default splits an object over 5 MB into a multipart upload (3+ requests,
    which moto and S3 also charge more for); a store's object goes in one PUT."""
    from s3server import s3_server
    from zarr.core.buffer import cpu
    from zarr.core.sync import sync

    with s3_server(("dparallel-test",), kind="moto"):  # its request log
        where = Location(f"s3://dparallel-test/large-{time.monotonic_ns()}")
        store = _s3.s3_zarr_store(where, read_only=False)
        data = bytes(range(256)) * (24 << 10)  # 6 MiB
        caplog.set_level(logging.INFO, logger="werkzeug")
        caplog.clear()
        sync(store.set("a/c.0", cpu.Buffer.from_bytes(data)))
        requests = [r.getMessage() for r in caplog.records if '" 200' in r.getMessage()]
        back = sync(store.get("a/c.0", cpu.buffer_prototype))
    targets = [re.search(r'"(\w+) (\S+) HTTP', m).groups() for m in requests]
    assert [m for m, _ in targets] == ["PUT"]
    assert not parse_qs(urlsplit(targets[0][1]).query)  # not a part of an upload
    assert back is not None and back.to_bytes() == data


def test_a_failed_request_is_an_os_error_naming_the_store(monkeypatch):
    """obstore's errors (no ``OSError``) reach zarr's callers as the ``OSError`` s3fs raised,
    naming the store's URL: the CLI prints them in one line, reads do not call them a
    corrupt chunk."""
    from s3server import point_at_nothing
    from zarr.core.buffer import cpu
    from zarr.core.sync import sync

    port = point_at_nothing(monkeypatch)
    where = Location(f"s3://bucket/dead-{port}/s.zarr")
    store = _s3.s3_zarr_store(where, read_only=False)
    assert str(store) == str(where) == str(store.with_read_only(True))
    with pytest.raises(OSError, match=rf"^{where}: .*GET"):
        sync(store.get("zarr.json", cpu.buffer_prototype))
    with pytest.raises(OSError, match=rf"^{where}: .*PUT"):
        sync(store.set("zarr.json", cpu.Buffer.from_bytes(b"{}")))


@pytest.mark.integration
def test_a_large_object_goes_in_one_put_blob_on_azure():
    """On Azure obstore's default would put an object over 5 MB in blocks (Put Block each
    5 MB, then Put Block List); a store's object goes in one Put Blob (Azure takes up to
    5,000 MiB so; 300 MB measured on Azurite: one request)."""
    from s3server import faulty_server
    from zarr.core.buffer import cpu
    from zarr.core.sync import sync

    seen: list[tuple[str, str]] = []

    def record(method: str, path: str) -> None:
        seen.append((method, path))

    with faulty_server("azurite", record) as bucket:
        store = _s3.s3_zarr_store(Location(f"{bucket}/large.zarr"), read_only=False)
        data = bytes(range(256)) * (48 << 10)  # 12 MiB
        sync(store.set("a/c.0", cpu.Buffer.from_bytes(data)))
        puts = list(seen)
        back = sync(store.get("a/c.0", cpu.buffer_prototype))
    assert [m for m, _ in puts] == ["PUT"]
    assert not parse_qs(urlsplit(puts[0][1]).query)  # no block of an upload
    assert back is not None and back.to_bytes() == data
