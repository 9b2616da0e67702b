"""The zarr store behind a dparallel store on S3: zarr's ``ObjectStore`` over obstore.

obstore (Rust's ``object_store``) sends a request for a tenth of the client CPU that
s3fs/botocore spends, which a featurize task's worker would otherwise lose to its ~70
puts (docs/store-format.md, "Which S3 client"). Only the store's own objects go through
it; the input files, the lease and the generation pointer stay with fsspec
(:mod:`~dparallel.io.location`, :mod:`~dparallel.store._objects`).

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

from zarr.storage import ObjectStore

from dparallel.errors import StoreError

if TYPE_CHECKING:
    from obstore.store import S3Credential
    from zarr.core.buffer import Buffer

    from dparallel.io.location import Location

__all__ = ["S3ObjectStore", "s3_zarr_store"]

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


class S3ObjectStore(ObjectStore):
    """zarr's ``ObjectStore`` that puts each object in one request.

    obstore would split an object over 5 MB into a multipart upload: four requests or more
    for a derivative chunk, which a store's writes, already many at a time, do not need.
    """

    async def set(self, key: str, value: Buffer) -> None:
        import obstore

        self._check_writable()
        await obstore.put_async(self.store, key, value.as_buffer_like(), use_multipart=False)


def s3_zarr_store(root: Location, read_only: bool) -> S3ObjectStore:
    """The zarr store at ``root`` (``s3://bucket/prefix``), read-only for ``read_only``."""
    try:
        from obstore.store import S3Store
    except ImportError:
        raise StoreError(
            f'{root}: a store on S3 needs obstore: pip install "dparallel[s3]"'
        ) from None
    config, profile = _config(root)
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
        store = S3Store.from_url(
            root.url.replace("s3a://", "s3://", 1),
            client_options={"allow_http": str(endpoint).startswith("http://")},
            credential_provider=provider,
            **config,
        )
    except Exception as exc:  # obstore's configuration errors: one class per cause
        raise StoreError(f"cannot open {root} as a zarr store: {exc}") from exc
    return S3ObjectStore(store, read_only=read_only)


def _config(root: Location) -> tuple[dict[str, Any], str | None]:
    """obstore's configuration from the location's s3fs-style options, and the profile."""
    config: dict[str, Any] = {}
    options = root.options
    profile = options.pop("profile", None)
    client = dict(options.pop("client_kwargs", None) or {})
    for name, value in options.items():
        if name in _CONFIG:
            config[_CONFIG[name]] = value
        elif name not in _S3FS_ONLY:
            raise StoreError(
                f"{root}: storage option {name!r} is not understood for a store on S3 "
                f"(understood: {', '.join(sorted([*_CONFIG, 'client_kwargs', 'profile']))})"
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
        raise StoreError(f"S3 credentials (profile {profile!r}): {exc}") from exc
    provider = None if credentials is None else _BotocoreCredentials(credentials)
    return provider, region
