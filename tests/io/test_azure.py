"""obstore's Azure client for a location (dparallel.io._azure): options in adlfs's words,
the connection string (options' or AZURE_STORAGE_CONNECTION_STRING), the account from an
abfs URL; the names compared are adlfs's and obstore's documented ones."""

from __future__ import annotations

import pytest

from dparallel.io import _azure, _s3
from dparallel.io.location import Location

pytest.importorskip("obstore")


@pytest.fixture(autouse=True)
def _no_azure_environment(monkeypatch):
    for name in (
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_USE_EMULATOR",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_ACCOUNT",
    ):
        monkeypatch.delenv(name, raising=False)
    _s3.clear_clients()
    yield
    _s3.clear_clients()


def test_adlfs_options_become_obstores_configuration():
    options = {
        "account_name": "acct",
        "account_key": "a2V5",
        "sas_token": "?sv=2024&sig=x",
        "tenant_id": "t",
        "client_id": "c",
        "client_secret": "s",
        "anon": 0,
        "blocksize": 4 << 20,  # adlfs's own tuning: no meaning for obstore
    }
    assert _azure._config("az://c/x", options) == {
        "account_name": "acct",
        "account_key": "a2V5",
        "sas_key": "sv=2024&sig=x",
        "tenant_id": "t",
        "client_id": "c",
        "client_secret": "s",
        "skip_signature": False,
    }
    assert _azure._config("az://c/x", {"account_host": "acct.blob.core.windows.net"}) == {
        "endpoint": "https://acct.blob.core.windows.net"
    }


@pytest.mark.parametrize("name", ["credential", "socket_timeout", "key"])
def test_an_option_obstore_cannot_honour_is_refused_by_name(name):
    with pytest.raises(_s3.S3OptionError, match=rf"storage option '{name}' is not understood"):
        Location("az://c/s.zarr", ((name, "x"),)).check_client()


def test_a_connection_string_from_the_options_or_the_environment(monkeypatch):
    text = (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;"
        "BlobEndpoint=https://acct.blob.example.org;EndpointSuffix=core.windows.net"
    )
    want = {
        "account_name": "acct",
        "account_key": "a2V5",
        "endpoint": "https://acct.blob.example.org",
    }
    assert _azure._config("az://c", {"connection_string": text}) == want
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", text)
    assert _azure._config("az://c", {}) == want
    # an account named in the options is theirs: the environment's string is not mixed in
    assert _azure._config("az://c", {"account_name": "other"}) == {"account_name": "other"}
    with pytest.raises(_s3.S3OptionError, match="no key=value parts"):
        _azure._config("az://c", {"connection_string": "nonsense"})


def test_azurites_connection_string_and_flags_reach_the_emulator(monkeypatch):
    dev = {"connection_string": "UseDevelopmentStorage=true"}
    store = _azure.azure_store("az://c/pre", dev)
    assert store.config["use_emulator"] in (True, "true")
    assert store.client_options["allow_http"] in (True, "true")  # Azurite speaks plain HTTP
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:1")
    assert _azure.azure_store("az://c", {}).client_options["allow_http"] in (True, "true")


def test_a_location_on_azure_goes_through_obstore_with_its_key():
    where = Location("abfs://c@acct.dfs.core.windows.net/a/s.zarr", (("account_key", "a2V5"),))
    store, key = where.object_store()
    assert key == "a/s.zarr"
    assert store.config["account_name"] == "acct" and store.config["container_name"] == "c"
    assert Location("az://c/a", (("account_name", "acct"),)).object_store()[1] == "a"
    assert where.object_store(small=True)[0].client_options["timeout"] == "15s"


def test_no_account_is_one_line_saying_where_to_give_one():
    """obstore's own error is several lines with a debug dump; the user gets one."""
    with pytest.raises(_s3.S3OptionError) as raised:
        _azure.azure_store("az://cont", {})
    message = str(raised.value)
    assert message.startswith("az://cont: no Azure storage account named")
    assert "AZURE_STORAGE_ACCOUNT_NAME" in message and "\n" not in message


def test_an_azure_error_document_is_said_in_one_line():
    """Azure's error message goes on with its request's id and time on lines of their own
    (Azure's and Azurite's): the error names the code and the message's first line only
    (before: three lines, in a one-line StoreError too)."""
    import obstore.exceptions as errors

    text = (
        "Generic MicrosoftAzure error: Error performing PUT http://h/a/c/k in 5ms - Server "
        'returned non-2xx status code: 503 Service Unavailable: <?xml version="1.0" '
        'encoding="utf-8"?>\n<Error><Code>ServerBusy</Code><Message>The server is busy.\n'
        "RequestId:4b3c\nTime:2026-11-29T12:00:00.0000000Z</Message></Error>\n\nDebug source: …"
    )
    with pytest.raises(OSError) as info, _s3.as_os_errors("az://c/k"):
        raise errors.GenericError(text)
    assert str(info.value) == (
        "az://c/k: Generic MicrosoftAzure error: Error performing PUT http://h/a/c/k in 5ms - "
        "Server returned non-2xx status code: 503 Service Unavailable: ServerBusy: "
        "The server is busy."
    )


def test_an_error_document_without_a_message_is_said_by_its_code():
    """An empty <Message> raised IndexError while the error was being reported, which
    the callers that catch OSError (retries, heartbeats) missed."""
    import obstore.exceptions as errors

    text = (
        "Generic S3 error: Error performing PUT http://h/b/k in 5ms - Server returned non-2xx "
        'status code: 503 Service Unavailable: <?xml version="1.0"?><Error><Code>SlowDown'
        "</Code><Message></Message></Error>"
    )
    with pytest.raises(OSError) as info, _s3.as_os_errors("s3://b/k"):
        raise errors.GenericError(text)
    assert str(info.value).endswith("503 Service Unavailable: SlowDown")
