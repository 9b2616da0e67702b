"""obstore's S3 client for a location (dparallel.io._s3): options in s3fs's words, keys
and region from botocore's chain where obstore would not find them."""

from __future__ import annotations

import hashlib
import http.server
import pickle
import subprocess
import sys
import threading
from typing import ClassVar

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
            ("anon", 0),
            ("client_kwargs", {"endpoint_url": "HTTP://127.0.0.1:9", "region_name": "eu-west-1",
                               "verify": False}),
            ("config_kwargs", {"max_pool_connections": 4, "s3": {"addressing_style": "virtual"}}),
        ),
    )  # fmt: skip
    config, client, profile = _s3._config(where.url, where.options)
    assert config == {
        "access_key_id": "AK",
        "secret_access_key": "SK",
        "session_token": "T",
        "skip_signature": False,
        "endpoint": "HTTP://127.0.0.1:9",
        "region": "eu-west-1",
        "virtual_hosted_style_request": True,
    }
    assert client == {"allow_invalid_certificates": True}
    assert profile is None
    store = _s3.s3_store(where.url, where.options)
    assert store.prefix == "feats.zarr"
    assert store.client_options["allow_http"] in (True, "true")  # an http:// endpoint
    assert _s3.s3_store(where.url, where.options) is store  # one client per URL and options


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"use_ssl": False}, "use_ssl"),
        ({"s3_additional_kwargs": {"SSECustomerKey": "k"}}, "s3_additional_kwargs"),
        ({"client_kwargs": {"verify": "/etc/ca.pem"}}, "client_kwargs.verify"),
    ],
)
def test_an_option_obstore_cannot_honour_is_refused_by_name(options, name):
    with pytest.raises(_s3.S3OptionError, match=rf"s3://b/x: storage option '{name}'"):
        _s3.s3_store("s3://b/x", options)


_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                   "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ROLE_ARN",
                   "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                   "AWS_CONTAINER_CREDENTIALS_FULL_URI")  # fmt: skip


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    """No ``AWS_*`` keys, region or role, and no shared files."""
    for name in _CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "absent-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent-config"))
    _s3.clear_clients()
    yield tmp_path
    _s3.clear_clients()


@pytest.fixture
def credentials_file(no_credentials, monkeypatch):
    """Keys and a region only in the shared files botocore reads."""
    (no_credentials / "credentials").write_text(
        "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n"
        "[other]\naws_access_key_id = OTHERKEY\naws_secret_access_key = OTHERSECRET\n"
    )
    (no_credentials / "config").write_text("[default]\nregion = eu-north-1\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(no_credentials / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(no_credentials / "config"))


@pytest.mark.usefixtures("credentials_file")
def test_keys_in_the_shared_credentials_file_are_found_as_s3fs_finds_them(monkeypatch):
    """obstore reads no credentials file; botocore's chain (what s3fs uses) does, for the
    default profile, one named in the options or in ``AWS_PROFILE``, and with ``anon:
    false``; the provider pickles as its profile."""
    store = _s3.s3_store("s3://bucket/feats.zarr", {"anon": False})
    given = store.credential_provider()
    assert (given["access_key_id"], given["secret_access_key"]) == ("FILEKEY", "FILESECRET")
    assert store.config["region"] == "eu-north-1"
    again = pickle.loads(pickle.dumps(store.credential_provider))()
    assert again["access_key_id"] == "FILEKEY"
    other = _s3.s3_store("s3://b/x", {"profile": "other"})
    assert other.credential_provider()["access_key_id"] == "OTHERKEY"
    with pytest.raises(_s3.S3OptionError, match="profile 'missing'"):
        _s3.s3_store("s3://b/x", {"profile": "missing"})
    monkeypatch.setenv("AWS_PROFILE", "other")
    _s3.clear_clients()
    assert _s3.s3_store("s3://b/x", {}).credential_provider()["access_key_id"] == "OTHERKEY"


@pytest.mark.usefixtures("credentials_file")
def test_a_named_profile_without_botocore_is_refused_in_one_line(monkeypatch):
    """Where botocore is not installed (an image may leave it out), a named profile says
    what reading it needs; without a profile, obstore's own chain is the last word."""
    monkeypatch.setitem(sys.modules, "botocore", None)  # import botocore fails
    monkeypatch.setitem(sys.modules, "botocore.session", None)
    with pytest.raises(_s3.S3OptionError, match=r"profile 'other'.*needs botocore"):
        _s3.s3_store("s3://b/x", {"profile": "other"})
    _s3.clear_clients()
    assert _s3.s3_store("s3://b/x", {}).credential_provider is None


_CLIENT_ONLY = """
import sys
from dparallel.io._s3 import s3_store
store = s3_store("s3://b/x", {})
print(store.credential_provider, "botocore" in sys.modules)
"""


@pytest.mark.usefixtures("no_credentials")
def test_keys_and_region_in_the_environment_need_no_botocore(monkeypatch):
    """Where the environment names keys and region and no shared file is there, obstore's
    own chain does all: a fresh process never loads botocore."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    done = subprocess.run([sys.executable, "-c", _CLIENT_ONLY], capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    assert done.stdout.split() == ["None", "False"]
    assert _s3.s3_store("s3://b/x", {"key": "K", "secret": "S"}).credential_provider is None


def test_a_failed_request_is_an_os_error_naming_the_location(no_credentials, monkeypatch):
    """obstore's errors are no ``OSError`` (but for a missing object); they reach the user
    as the ``OSError`` s3fs raised, naming the URL, in one line."""
    from s3server import point_at_nothing

    from dparallel.io.location import as_location

    point_at_nothing(monkeypatch)
    where = as_location("s3://bucket/data.xyz")
    with pytest.raises(OSError, match=r"^s3://bucket/data.xyz: .*HEAD") as info:
        where.info()
    assert "\n" not in str(info.value)
    with pytest.raises(OSError, match=r"^s3://bucket/data.xyz: .*GET"):
        where.read_range(0, 10)


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A loopback S3 stand-in that answers every PUT and keeps its payload-hash header."""

    seen: ClassVar[list[str]] = []

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append(self.headers.get("x-amz-content-sha256", ""))
        self.send_response(200)
        self.send_header("ETag", '"e"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.usefixtures("no_credentials")
def test_the_body_is_hashed_for_the_signature_only_without_tls(monkeypatch):
    """As botocore: over HTTPS (AWS's endpoints, any https:// one) the signature leaves the
    body out (TLS guards it; hashing every uploaded byte costs the workers CPU); over plain
    HTTP the body is signed, as sent on the wire; ``AWS_UNSIGNED_PAYLOAD`` decides where
    it is set."""
    import obstore

    assert _s3.s3_store("s3://b/aws", {}).config["unsigned_payload"] in (True, "true")
    https = {"endpoint_url": "https://minio.example:9000"}
    assert _s3.s3_store("s3://b/https", https).config["unsigned_payload"] in (True, "true")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    keys = {"key": "K", "secret": "S", "endpoint_url": f"http://127.0.0.1:{server.server_port}"}
    try:
        body = b"values " * 1000
        obstore.put(_s3.s3_store("s3://bucket/plain", keys), "k", body, use_multipart=False)
        monkeypatch.setenv("AWS_UNSIGNED_PAYLOAD", "true")
        _s3.clear_clients()
        obstore.put(_s3.s3_store("s3://bucket/plain", keys), "k", body, use_multipart=False)
    finally:
        server.shutdown()
        server.server_close()
    assert _Recorder.seen == [hashlib.sha256(body).hexdigest(), "UNSIGNED-PAYLOAD"]


@pytest.mark.parametrize(
    "endpoint",
    ["127.0.0.1:9000", "minio:9000", "http://127.0.0.1:9000 ", "not a url", "http://h:x"],
)
@pytest.mark.parametrize("given", ["option", "environment"])
def test_an_endpoint_that_is_no_url_is_refused_in_one_line(endpoint, given, monkeypatch):
    """obstore's client panics (a Rust panic, past every ``except Exception``) on the first
    request to an endpoint without a scheme; it is refused by name before any client."""
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    options = {"endpoint_url": endpoint} if given == "option" else {}
    if given == "environment":
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    named = "endpoint_url" if given == "option" else "AWS_ENDPOINT_URL"
    with pytest.raises(_s3.S3OptionError, match=rf"^s3://b/e: the S3 endpoint .*\({named}\)"):
        _s3.s3_store("s3://b/e", options)
    with pytest.raises(_s3.S3OptionError):
        Location("s3://b/e", tuple(options.items())).check_client()
