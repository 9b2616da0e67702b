"""obstore's S3 client for a location (dparallel.io._s3): options in s3fs's words, keys
and region from botocore's chain where obstore would not find them."""

from __future__ import annotations

import pytest

from dparallel.io import _s3
from dparallel.io.location import Location

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
    config, profile = _s3._config(where.url, where.options)
    assert config == {
        "access_key_id": "AK",
        "secret_access_key": "SK",
        "session_token": "T",
        "endpoint": "http://127.0.0.1:9",
        "region": "eu-west-1",
    }
    assert profile is None
    store = _s3.s3_store(where.url, where.options)
    assert store.prefix == "feats.zarr"
    assert store.client_options["allow_http"] in (True, "true")  # an http:// endpoint


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
    store = _s3.s3_store("s3://bucket/feats.zarr", {})
    given = store.credential_provider()
    assert (given["access_key_id"], given["secret_access_key"]) == ("FILEKEY", "FILESECRET")
    assert store.config["region"] == "eu-north-1"
    other = _s3.s3_store("s3://b/x", {"profile": "other"})
    assert other.credential_provider()["access_key_id"] == "OTHERKEY"
    with pytest.raises(_s3.S3OptionError, match="profile 'missing'"):
        _s3.s3_store("s3://b/x", {"profile": "missing"})


def test_keys_given_as_options_or_in_the_environment_need_no_botocore(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET")
    assert _s3.s3_store("s3://b/x", {}).credential_provider is None
    assert _s3.s3_store("s3://b/x", {"key": "K", "secret": "S"}).credential_provider is None
