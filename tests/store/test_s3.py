"""The zarr store of a dparallel store on S3 (obstore): options in s3fs's words, credentials
from botocore's chain, one PUT per object."""

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


def test_s3fs_options_become_obstores_configuration():
    where = Location(
        "s3://bucket/feats.zarr",
        (
            ("key", "AK"),
            ("secret", "SK"),
            ("token", "T"),
            ("client_kwargs", {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1"}),
            ("config_kwargs", {"max_pool_connections": 4}),  # s3fs's own tuning: no meaning
        ),
    )
    config, profile = _s3._config(where)
    assert config == {
        "access_key_id": "AK",
        "secret_access_key": "SK",
        "session_token": "T",
        "endpoint": "http://127.0.0.1:9",
        "region": "eu-west-1",
    }
    assert profile is None
    store = _s3.s3_zarr_store(where, read_only=True)
    assert store.read_only and store.store.prefix == "feats.zarr"
    assert store.store.client_options["allow_http"] in (True, "true")  # an http:// endpoint


def test_an_option_obstore_cannot_honour_is_refused_by_name():
    where = Location("s3://bucket/feats.zarr", (("use_ssl", False),))
    with pytest.raises(StoreError, match=r"s3://bucket/feats.zarr: storage option 'use_ssl'"):
        _s3.s3_zarr_store(where, read_only=True)


@pytest.fixture
def credentials_file(tmp_path, monkeypatch):
    """Keys and a region only in the shared files botocore reads (no ``AWS_*`` keys)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "credentials").write_text(
        "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n"
        "[other]\naws_access_key_id = OTHERKEY\naws_secret_access_key = OTHERSECRET\n"
    )
    (tmp_path / "config").write_text("[default]\nregion = eu-north-1\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    _s3._botocore.cache_clear()
    yield
    _s3._botocore.cache_clear()


@pytest.mark.usefixtures("credentials_file")
def test_keys_in_the_shared_credentials_file_are_found_as_s3fs_finds_them():
    """obstore reads no credentials file; botocore's chain (what s3fs uses) does."""
    store = _s3.s3_zarr_store(Location("s3://bucket/feats.zarr"), read_only=True)
    given = store.store.credential_provider()
    assert (given["access_key_id"], given["secret_access_key"]) == ("FILEKEY", "FILESECRET")
    assert store.store.config["region"] == "eu-north-1"
    other = _s3.s3_zarr_store(Location("s3://b/x", (("profile", "other"),)), read_only=True)
    assert other.store.credential_provider()["access_key_id"] == "OTHERKEY"
    with pytest.raises(StoreError, match="profile 'missing'"):
        _s3.s3_zarr_store(Location("s3://b/x", (("profile", "missing"),)), read_only=True)


def test_keys_given_as_options_or_in_the_environment_need_no_botocore(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET")
    assert _s3.s3_zarr_store(Location("s3://b/x"), True).store.credential_provider is None
    given = Location("s3://b/x", (("key", "K"), ("secret", "S")))
    assert _s3.s3_zarr_store(given, True).store.credential_provider is None


@pytest.mark.integration
def test_a_large_object_goes_in_one_put(caplog):
    """obstore's default splits an object over 5 MB into a multipart upload (3+ requests,
    which moto and S3 also charge more for); a store's object goes in one PUT."""
    from s3server import s3_server
    from zarr.core.buffer import cpu
    from zarr.core.sync import sync

    with s3_server(("dparallel-test",)):
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
