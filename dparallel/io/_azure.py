"""obstore's Azure Blob client for a location at ``az://`` (or ``abfs://``, ``abfss://``).

The same client as on S3 (:mod:`dparallel.io._s3`: timeouts, retries, one per URL and
options in a process), so a store there is written as on S3: its objects through zarr's
``ObjectStore``, its lease and pointer by conditional writes (create-if-absent, ETag
match), which Azure Blob Storage and Azurite honour.

Where its credentials and endpoint come from, in order: the location's
``storage_options`` in adlfs's words (``account_name``, ``account_key``, ``sas_token``,
``connection_string``, ``tenant_id``, ``client_id``, ``client_secret``, ``anon``,
``account_host``), then ``AZURE_STORAGE_CONNECTION_STRING``, then the rest of the
process's ``AZURE_*`` environment (obstore reads it: ``AZURE_STORAGE_ACCOUNT_NAME``,
``AZURE_STORAGE_ACCOUNT_KEY``, ``AZURE_STORAGE_SAS_TOKEN``, ``AZURE_CLIENT_ID`` …, managed
identity; ``AZURE_STORAGE_USE_EMULATOR=true`` with ``AZURITE_BLOB_STORAGE_URL`` for
Azurite). ``abfs://container@account.dfs.core.windows.net/path`` names the account too.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from dparallel.io import _s3

if TYPE_CHECKING:
    from collections.abc import Mapping

    from obstore.store import AzureStore

__all__ = ["AZURE_PROTOCOLS", "azure_store", "check_options"]

#: URL schemes that name Azure Blob Storage.
AZURE_PROTOCOLS = ("az", "abfs", "abfss")

#: adlfs's options and the obstore ``AzureConfig`` key each one is.
_CONFIG = {
    "account_name": "account_name",
    "account_key": "account_key",
    "sas_token": "sas_key",
    "tenant_id": "tenant_id",
    "client_id": "client_id",
    "client_secret": "client_secret",
    "anon": "skip_signature",
}
#: adlfs's tuning of its own client and cache: no meaning for obstore.
_ADLFS_ONLY = frozenset(
    {
        "blocksize",
        "default_fill_cache",
        "default_cache_type",
        "version_aware",
        "assume_container_exists",
        "max_concurrency",
        "timeout",
        "connection_timeout",
        "read_timeout",
        "asynchronous",
        "loop",
        "skip_instance_cache",
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "location_mode",
    }
)
#: A connection string's parts and the obstore key each one is.
_CONNECTION = {
    "accountname": "account_name",
    "accountkey": "account_key",
    "sharedaccesssignature": "sas_key",
    "blobendpoint": "endpoint",
}
_EMULATOR_URL_ENV = "AZURITE_BLOB_STORAGE_URL"
#: Azurite's own address, where obstore's emulator mode goes without the variable above.
_EMULATOR_URL = "http://127.0.0.1:10000"


def azure_store(url: str, options: Mapping[str, Any], *, small: bool = False) -> AzureStore:
    """obstore's client for ``url`` (``az://container``, keys relative to it) with the
    location's ``storage_options``; ``small`` as :func:`dparallel.io._s3.s3_store`.

    Raises :class:`~dparallel.io._s3.S3OptionError` for an option it cannot honour, or
    obstore not installed.
    """
    return _s3.cached_client(url, options, small, _new_store)


def check_options(url: str, options: Mapping[str, Any]) -> None:
    """Raise :class:`~dparallel.io._s3.S3OptionError` for an option obstore cannot honour;
    makes no client."""
    _config(url, options)


def _new_store(url: str, options: Mapping[str, Any], small: bool) -> AzureStore:
    try:
        from obstore.store import AzureStore
    except ImportError:
        raise _s3.S3OptionError(
            f'{url}: Azure needs obstore: pip install "dparallel[s3]"'
        ) from None
    config = _config(url, options)
    emulated = str(config.get("use_emulator", os.environ.get("AZURE_STORAGE_USE_EMULATOR", "")))
    endpoint = str(config.get("endpoint") or os.environ.get("AZURE_STORAGE_ENDPOINT") or "")
    if emulated.lower() in ("1", "true", "yes"):
        endpoint = os.environ.get(_EMULATOR_URL_ENV) or _EMULATOR_URL
    client, retry = _s3.client_limits(small)
    client.setdefault("allow_http", endpoint.lower().startswith("http://"))
    try:
        return AzureStore.from_url(
            url,
            client_options=client,  # type: ignore[arg-type]
            retry_config=retry,  # type: ignore[arg-type]
            **config,
        )
    except Exception as exc:  # obstore's configuration errors: one class per cause
        raise _s3.S3OptionError(f"{url}: {_configuration_error(exc)}") from exc


def _configuration_error(exc: Exception) -> str:
    """obstore's configuration error in one line (its first; it appends a debug dump), a
    missing account said with where to give one."""
    text = str(exc).strip()
    if "MissingAccount" in text:
        return (
            "no Azure storage account named: set AZURE_STORAGE_ACCOUNT_NAME (with "
            "AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN or a service principal) or "
            "AZURE_STORAGE_CONNECTION_STRING, give storage_options account_name, or name it "
            "in the URL (abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/…)"
        )
    return text.splitlines()[0] if text else type(exc).__name__


def _config(url: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """obstore's store configuration from adlfs-style options and the connection string
    (the options' or ``AZURE_STORAGE_CONNECTION_STRING``)."""
    options = dict(given)
    connection = options.pop("connection_string", None)
    host = options.pop("account_host", None)
    config: dict[str, Any] = {}
    named = {k for k in options if k in _CONFIG}
    if connection is None and not named & {"account_name", "account_key", "sas_token"}:
        connection = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if connection:
        config.update(_connection(url, str(connection)))
    for name, value in options.items():
        if name in _CONFIG:
            config[_CONFIG[name]] = value
        elif name not in _ADLFS_ONLY:
            raise _s3.S3OptionError(
                f"{url}: storage option {name!r} is not understood on Azure (understood: "
                f"{', '.join(sorted([*_CONFIG, 'connection_string', 'account_host']))})"
            )
    if host:
        config["endpoint"] = f"https://{host}"
    if "skip_signature" in config:
        config["skip_signature"] = bool(config["skip_signature"])
    if "sas_key" in config:
        config["sas_key"] = str(config["sas_key"]).lstrip("?")
    return config


def _connection(url: str, text: str) -> dict[str, Any]:
    """A connection string's account, key, SAS and endpoint (``UseDevelopmentStorage=true``:
    Azurite); refused where it has no ``key=value`` parts."""
    parts = dict(p.split("=", 1) for p in text.split(";") if "=" in p)
    if not parts:
        raise _s3.S3OptionError(
            f"{url}: the Azure connection string has no key=value parts "
            "(e.g. AccountName=…;AccountKey=…)"
        )
    lowered = {k.strip().lower(): v.strip() for k, v in parts.items()}
    config: dict[str, Any] = {_CONNECTION[k]: v for k, v in lowered.items() if k in _CONNECTION}
    if lowered.get("usedevelopmentstorage", "").lower() == "true":
        config["use_emulator"] = True
    return config
