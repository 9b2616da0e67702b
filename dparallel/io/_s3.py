"""obstore's S3 client for a location at ``s3://``: one configuration for every reader.

obstore (Rust's ``object_store``) sends a request for a tenth of the client CPU that
s3fs/botocore spends, and a process starts it in milliseconds where s3fs takes ~0.45 s
(imports and botocore's service model) on its first request (docs/store-format.md, "Which
S3 client"). A store's objects and a task's reads of its input go through it; the driver's
index of an input and a store's lease and pointer stay on s3fs
(:meth:`~dparallel.io.location.Location.filesystem`).

Where its credentials and endpoint come from, in order: the location's
``storage_options`` in s3fs's words (``key``, ``secret``, ``token``, ``anon``,
``endpoint_url``, ``client_kwargs={"endpoint_url", "region_name"}``,
``requester_pays``, ``profile``), then the process's ``AWS_*`` environment (obstore reads
it), then, when neither names a key, botocore's chain (the shared credentials file and
profiles, as s3fs would find them).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

from dparallel.errors import DParallelError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from obstore.store import S3Credential, S3Store

__all__ = ["S3_PROTOCOLS", "S3OptionError", "s3_store"]

#: URL schemes that name S3.
S3_PROTOCOLS = ("s3", "s3a")

#: s3fs's options and the obstore ``S3Config`` key each one is.
_CONFIG = {
    "key": "access_key_id",
    "secret": "secret_access_key",
    "token": "session_token",
    "endpoint_url": "endpoint",
    "requester_pays": "request_payer",
    "anon": "skip_signature",
}
#: ``client_kwargs`` (botocore's client) that mean something here.
_CLIENT = {"endpoint_url": "endpoint", "region_name": "region"}
#: s3fs's tuning of its own client and cache: no meaning for obstore.
_S3FS_ONLY = frozenset(
    {
        "config_kwargs",
        "max_concurrency",
        "default_block_size",
        "default_fill_cache",
        "default_cache_type",
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "skip_instance_cache",
        "cache_regions",
        "asynchronous",
        "loop",
        "fixed_upload_size",
        "version_aware",
        "s3_additional_kwargs",
    }
)
_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
_REGION_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION")


class S3OptionError(DParallelError, ValueError):
    """An S3 location whose options or credentials obstore cannot be given."""


def s3_store(url: str, options: Mapping[str, Any]) -> S3Store:
    """obstore's client for ``url`` (``s3://bucket/prefix``, keys relative to it) with the
    location's ``storage_options``.

    Raises :class:`S3OptionError` for an option it cannot honour, a missing profile, or
    obstore not installed.
    """
    try:
        from obstore.store import S3Store
    except ImportError:
        raise S3OptionError(f'{url}: S3 needs obstore: pip install "dparallel[s3]"') from None
    config, profile = _config(url, options)
    endpoint = config.get("endpoint") or next(
        (os.environ[name] for name in _ENDPOINT_ENV if os.environ.get(name)), ""
    )
    provider = None
    if not any(k in config for k in ("access_key_id", "skip_signature")) and (
        profile is not None or not os.environ.get("AWS_ACCESS_KEY_ID")
    ):
        provider = _botocore(profile)[0]
    if "region" not in config and not any(map(os.environ.get, _REGION_ENV)):
        region = _botocore(profile)[1]
        if region:
            config["region"] = region
    try:
        return S3Store.from_url(
            url.replace("s3a://", "s3://", 1),
            client_options={"allow_http": str(endpoint).startswith("http://")},
            credential_provider=provider,
            **config,
        )
    except Exception as exc:  # obstore's configuration errors: one class per cause
        raise S3OptionError(f"{url}: {exc}") from exc


def _config(url: str, given: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """obstore's configuration from s3fs-style options, and the profile."""
    config: dict[str, Any] = {}
    options = dict(given)
    profile = options.pop("profile", None)
    client = dict(options.pop("client_kwargs", None) or {})
    for name, value in options.items():
        if name in _CONFIG:
            config[_CONFIG[name]] = value
        elif name not in _S3FS_ONLY:
            understood = sorted([*_CONFIG, "client_kwargs", "profile"])
            raise S3OptionError(
                f"{url}: storage option {name!r} is not understood on S3 "
                f"(understood: {', '.join(understood)})"
            )
    for name, value in client.items():
        if name in _CLIENT:
            config[_CLIENT[name]] = value
    if "request_payer" in config:
        config["request_payer"] = bool(config["request_payer"])
    return config, profile


class _BotocoreCredentials:
    """obstore's credential callback over botocore's chain (shared files, profiles, SSO,
    instance roles), refreshed when botocore says they expire."""

    def __init__(self, credentials: Any) -> None:
        self._credentials = credentials

    def __call__(self) -> S3Credential:
        frozen = self._credentials.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": getattr(self._credentials, "_expiry_time", None),
        }


@functools.cache
def _botocore(profile: str | None) -> tuple[_BotocoreCredentials | None, str | None]:
    """botocore's credentials and region for ``profile`` (``None``: the default chain),
    once per process; ``None`` for what it does not find (obstore's own chain is then
    the last word)."""
    try:
        import botocore.session
    except ImportError:
        return None, None
    try:
        session = botocore.session.Session(profile=profile)
        credentials = session.get_credentials()
        region = session.get_config_variable("region")
    except Exception as exc:  # botocore's ProfileNotFound and its kin
        raise S3OptionError(f"S3 credentials (profile {profile!r}): {exc}") from exc
    provider = None if credentials is None else _BotocoreCredentials(credentials)
    return provider, region
