"""obstore's S3 client for a location at ``s3://``: one configuration for every reader.

obstore (Rust's ``object_store``) sends a request for a tenth of the client CPU that
s3fs/botocore spends, and a process starts it in milliseconds where s3fs takes ~0.45 s
(imports and botocore's service model) on its first request (docs/store-format.md, "Which
S3 client"). It is dparallel's one S3 client: a store's objects, its lease and pointer, and
every read of an input go through it (:mod:`dparallel.io._s3_objects` holds what a
location does there).

Where its credentials and endpoint come from, in order: the location's
``storage_options`` in s3fs's words (``key``, ``secret``, ``token``, ``anon``,
``endpoint_url``, ``client_kwargs={"endpoint_url", "region_name"}``,
``requester_pays``, ``profile``), then the process's ``AWS_*`` environment (obstore reads
it), then, when neither names a key, botocore's chain (the shared credentials file and
profiles, as s3fs would find them), and its region where none is set. Without a profile
or those files, botocore is never loaded (obstore's own chain covers the environment,
web identity and instance or container roles). obstore does not follow S3's redirect to a
bucket's region: outside ``us-east-1`` name the region (``AWS_REGION``, the profile, or
``client_kwargs={"region_name": …}``). A client made before a ``fork`` hangs in the child:
dparallel's workers start from Dask's forkserver; open stores after forking.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import functools
import importlib.util
import os
import re
from typing import TYPE_CHECKING, Any

from dparallel.errors import DParallelError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from obstore.store import S3Credential, S3Store

__all__ = [
    "S3_PROTOCOLS",
    "S3OptionError",
    "as_os_errors",
    "cached_client",
    "check_options",
    "clear_clients",
    "client_limits",
    "s3_store",
]

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
_FLAGS = ("request_payer", "skip_signature")
#: ``client_kwargs`` (botocore's client) that mean something here.
_CLIENT = {"endpoint_url": "endpoint", "region_name": "region"}
#: s3fs's tuning of its own client and cache: no meaning for obstore (``config_kwargs``
#: is botocore's; only its ``s3.addressing_style`` is carried over).
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
    }
)
_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
_REGION_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION")
#: A whole request's limit (obstore's default, 30 s, would fail a tens-of-MB chunk put in
#: one request over a link slower than a few MB/s).
_REQUEST_TIMEOUT = "600s"
#: Limits of a client for small objects (the lease, the pointer): a stalled connection
#: gives up within ~30 s, well inside a lease's heartbeat timeout (60 s), rather than
#: holding a heartbeat for minutes (s3fs gave up after 5 s connecting, 15 s reading).
_SMALL_REQUESTS = {"timeout": "15s", "connect_timeout": "5s"}
#: The wait before each retry of a failed request (a 5xx, S3's 503 SlowDown among them, a
#: connection reset or refused): at random between ``init_backoff`` and ``base`` times the
#: last wait, at most ``max_backoff``. obstore's default (0.1 s, 2, 15 s) gave up after its
#: 10 retries within ~1.6 s (measured), so a 3-s burst of 503s failed a partition; these
#: wait 5-32 s in all (13 s typically) before a request fails (botocore, which s3fs
#: used, waits up to 15 s over its 4 retries).
BACKOFF = {
    "init_backoff": datetime.timedelta(seconds=0.5),
    "max_backoff": datetime.timedelta(seconds=4),
    "base": 2,
}
_RETRIES = {"max_retries": 10, "retry_timeout": datetime.timedelta(minutes=3)}
#: The lease's and the pointer's: retried 3 times, given up after ~30 s in all.
_SMALL_RETRIES = {"max_retries": 3, "retry_timeout": datetime.timedelta(seconds=15)}
#: Clients made in this process, by URL, options and kind: a store reopened for every
#: task keeps its connections.
_STORES: dict[tuple[str, str, bool], Any] = {}


class S3OptionError(DParallelError, ValueError):
    """An S3 location whose options or credentials obstore cannot be given."""


def s3_store(url: str, options: Mapping[str, Any], *, small: bool = False) -> S3Store:
    """obstore's client for ``url`` (``s3://bucket/prefix``, keys relative to it) with the
    location's ``storage_options`` (one per URL, options and kind in a process); ``small``:
    one whose requests give up within ~30 s (for the lease and the pointer).

    Raises :class:`S3OptionError` for an option it cannot honour, a missing profile, or
    obstore not installed.
    """
    return cached_client(url, options, small, _new_store)


def cached_client(
    url: str,
    options: Mapping[str, Any],
    small: bool,
    make: Callable[[str, Mapping[str, Any], bool], Any],
) -> Any:
    """The client ``make(url, options, small)`` made once per URL, options and kind in a
    process (:func:`clear_clients` forgets them)."""
    cached = (url, repr(sorted(options.items())), small)
    store = _STORES.get(cached)
    if store is None:
        store = _STORES[cached] = make(url, options, small)
    return store


def client_limits(small: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """obstore's client options (timeouts) and retry configuration of a client for large
    objects, or (``small``) for the lease and the pointer: every service's the same."""
    client: dict[str, Any] = {"timeout": _REQUEST_TIMEOUT}
    retry = {**(_SMALL_RETRIES if small else _RETRIES), "backoff": BACKOFF}
    if small:
        client.update(_SMALL_REQUESTS)
    return client, retry


def check_options(url: str, options: Mapping[str, Any]) -> None:
    """Raise :class:`S3OptionError` for an option obstore cannot honour; makes no client
    (no credential lookup, nothing requested)."""
    _config(url, options)


def clear_clients() -> None:
    """Forget the clients made so far (the next ones read the environment afresh)."""
    _STORES.clear()
    _botocore.cache_clear()


def _new_store(url: str, options: Mapping[str, Any], small: bool) -> S3Store:
    try:
        from obstore.store import S3Store
    except ImportError:
        raise S3OptionError(f'{url}: S3 needs obstore: pip install "dparallel[s3]"') from None
    config, given, profile = _config(url, options)
    client, retry = client_limits(small)
    client.update(given)
    endpoint = str(config.get("endpoint") or _first_env(_ENDPOINT_ENV) or "")
    plain_http = endpoint.lower().startswith("http://")
    client.setdefault("allow_http", plain_http)
    if not os.environ.get("AWS_UNSIGNED_PAYLOAD"):
        # as botocore: over HTTPS, whose TLS guards the body, the signature does not
        # hash it (every byte a worker uploads was hashed once more for nothing)
        config.setdefault("unsigned_payload", not plain_http)
    provider = None
    profiled = profile is not None or bool(os.environ.get("AWS_PROFILE")) or _aws_files()
    keyed = bool(config.get("access_key_id")) or bool(config.get("skip_signature"))
    if not keyed and profiled and (profile or not os.environ.get("AWS_ACCESS_KEY_ID")):
        provider = _botocore(profile)[0]
        named = profile or os.environ.get("AWS_PROFILE")
        if provider is None and named and importlib.util.find_spec("botocore") is None:
            raise S3OptionError(
                f"{url}: S3 credentials (profile {named!r}): reading AWS profiles needs "
                'botocore: pip install "dparallel[s3]"'
            )
    if "region" not in config and not _first_env(_REGION_ENV) and profiled:
        region = _botocore(profile)[1]
        if region:
            config["region"] = region
    try:
        return S3Store.from_url(
            url.replace("s3a://", "s3://", 1),
            client_options=client,  # type: ignore[arg-type]
            retry_config=retry,  # type: ignore[arg-type]
            credential_provider=provider,
            **config,
        )
    except Exception as exc:  # obstore's configuration errors: one class per cause
        raise S3OptionError(f"{url}: {exc}") from exc


def _first_env(names: tuple[str, ...]) -> str | None:
    return next((os.environ[name] for name in names if os.environ.get(name)), None)


def _aws_files() -> bool:
    """Whether botocore's shared credentials or config file is there (where keys, profiles,
    SSO and regions live that obstore does not read)."""
    home = os.path.expanduser("~/.aws")
    paths = (
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(home, "credentials"),
        os.environ.get("AWS_CONFIG_FILE") or os.path.join(home, "config"),
    )
    return any(os.path.isfile(p) for p in paths)


def _config(
    url: str, given: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """obstore's store and client configuration from s3fs-style options, and the profile."""
    config: dict[str, Any] = {}
    options = dict(given)
    profile = options.pop("profile", None)
    client_kwargs = dict(options.pop("client_kwargs", None) or {})
    s3_config = dict((options.get("config_kwargs") or {}).get("s3") or {})
    for name, value in options.items():
        if name in _CONFIG:
            config[_CONFIG[name]] = value
        elif name not in _S3FS_ONLY:
            _refuse(url, name, [*_CONFIG, "client_kwargs", "profile"])
    client: dict[str, Any] = {}
    for name, value in client_kwargs.items():
        if name in _CLIENT:
            config[_CLIENT[name]] = value
        elif name == "verify" and isinstance(value, bool):
            client["allow_invalid_certificates"] = not value
        else:
            _refuse(url, f"client_kwargs.{name}", [*_CLIENT, "verify (True or False)"])
    if s3_config.get("addressing_style") in ("virtual", "path"):
        config["virtual_hosted_style_request"] = s3_config["addressing_style"] == "virtual"
    for flag in _FLAGS:
        if flag in config:
            config[flag] = bool(config[flag])
    named = "endpoint_url" if config.get("endpoint") else None
    if named is None:
        named = next((name for name in _ENDPOINT_ENV if os.environ.get(name)), None)
    if named is not None:
        _check_endpoint(url, str(config.get("endpoint") or os.environ[named]), named)
    return config, client, profile


def _check_endpoint(url: str, endpoint: str, named: str) -> None:
    """Refuse an endpoint obstore cannot request (its client panics on one): an http(s)
    URL with a host, nothing else."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 - raises for a port that is no number
    except ValueError:
        parts = None
    if (
        parts is None
        or parts.scheme.lower() not in ("http", "https")
        or not parts.hostname
        or endpoint != endpoint.strip()
        or any(c.isspace() for c in endpoint)
    ):
        raise S3OptionError(
            f"{url}: the S3 endpoint {endpoint!r} ({named}) is no http:// or https:// URL "
            "with a host (e.g. http://127.0.0.1:9000)"
        )


def _refuse(url: str, name: str, understood: list[str]) -> None:
    raise S3OptionError(
        f"{url}: storage option {name!r} is not understood on S3 "
        f"(understood: {', '.join(sorted(understood))})"
    )


@contextlib.contextmanager
def as_os_errors(where: object) -> Iterator[None]:
    """obstore's errors inside the block raised as the ``OSError`` s3fs gave, naming
    ``where`` and the cause's first line: ``PermissionError`` for a refusal,
    ``FileNotFoundError`` for a missing object, ``OSError`` otherwise."""
    import obstore.exceptions as errors

    try:
        yield
    except (errors.BaseError, FileNotFoundError) as exc:
        message = f"{where}: {_first_line(str(exc)) or type(exc).__name__}"
        if isinstance(exc, FileNotFoundError):
            raise FileNotFoundError(message) from exc
        if isinstance(exc, (errors.PermissionDeniedError, errors.UnauthenticatedError)):
            raise PermissionError(errno.EACCES, message) from exc
        raise OSError(message) from exc


_XML_ERROR = re.compile(r"<Code>([^<]*)</Code>\s*<Message>([^<]*)</Message>")
#: Where obstore's credential chain ends when nothing named a key: the instance metadata
#: service's token (at 169.254.169.254, or ``AWS_METADATA_ENDPOINT``).
_METADATA_TOKEN = "/latest/api/token"


def _first_line(text: str) -> str:
    """The first line of an obstore error, its S3 or Azure error document (XML) read as
    ``Code: Message`` (the message's first line), and a failed credential lookup said as such."""
    text = text.strip()
    first = text.splitlines()[0] if text else ""
    if _METADATA_TOKEN in first:
        return (
            "no S3 credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
            "AWS_PROFILE), or give storage_options key and secret (obstore then asked the "
            f"instance metadata service: {first})"
        )
    found = _XML_ERROR.search(text)
    if found is not None and "<?xml" in first:
        message = (found[2].strip().splitlines() or [""])[0]  # Azure's: RequestId, Time
        said = f"{found[1]}: {message}" if message else found[1]
        first = f"{first.split('<?xml', 1)[0].rstrip(' :')}: {said}"
    return first


class _BotocoreCredentials:
    """obstore's credential callback over botocore's chain (shared files, profiles, SSO,
    instance roles), refreshed when botocore says they expire; pickled as its profile."""

    def __init__(self, credentials: Any, profile: str | None) -> None:
        self._credentials = credentials
        self._profile = profile

    def __reduce__(self) -> tuple[Any, tuple[str | None]]:
        return _botocore_provider, (self._profile,)

    def __call__(self) -> S3Credential:
        frozen = self._credentials.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": getattr(self._credentials, "_expiry_time", None),
        }


def _botocore_provider(profile: str | None) -> _BotocoreCredentials | None:
    return _botocore(profile)[0]


@functools.cache
def _botocore(profile: str | None) -> tuple[_BotocoreCredentials | None, str | None]:
    """botocore's credentials and region for ``profile`` (``None``: the default chain),
    once per process; ``None`` for what it does not find (obstore's own chain is then
    the last word)."""
    try:
        import botocore.session
    except ImportError:  # the s3 extra brings it; an image may leave it out
        return None, None
    try:
        session = botocore.session.Session(profile=profile)
        credentials = session.get_credentials()
        region = session.get_config_variable("region")
    except Exception as exc:  # botocore's ProfileNotFound and its kin
        raise S3OptionError(f"S3 credentials (profile {profile!r}): {exc}") from exc
    provider = None if credentials is None else _BotocoreCredentials(credentials, profile)
    return provider, region
