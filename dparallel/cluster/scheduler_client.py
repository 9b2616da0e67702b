"""A client of a running Dask scheduler: its address checked, TLS certificates, the
scheduler file, the start bounded (:mod:`dparallel.cluster.client_start`), and each way it
fails a :class:`~dparallel.errors.ClusterError` that says what to check.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from distributed import Client
from distributed.security import Security

from dparallel.cluster.client_start import Refused, Unanswered, start_within
from dparallel.errors import ClusterError

if TYPE_CHECKING:
    import os

    from dparallel.cluster.spec import ClusterSpec, TLSSpec

__all__ = ["HANDSHAKE_GRACE_S", "client_security", "read_scheduler_file", "scheduler_client"]

#: Seconds beyond ``connect_timeout`` that a client's whole start may take: distributed
#: bounds the TCP connection by it, not the handshake after (a server of another protocol
#: that accepts the connection and never answers held ``Client()`` for good).
HANDSHAKE_GRACE_S = 10.0


def read_scheduler_file(path: str | os.PathLike[str]) -> str:
    """Scheduler address from a ``dask scheduler --scheduler-file`` JSON file."""
    try:
        with open(path) as f:
            info = json.load(f)
    except FileNotFoundError:
        raise ClusterError(
            f"scheduler file {str(path)!r} does not exist; start the scheduler with "
            f"`dask scheduler --scheduler-file {path}` or give --scheduler ADDRESS"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ClusterError(f"scheduler file {str(path)!r} is not readable JSON: {exc}") from exc
    address = info.get("address") if isinstance(info, dict) else None
    if not isinstance(address, str):
        raise ClusterError(f"scheduler file {str(path)!r} has no 'address' entry")
    return address


def scheduler_client(address: str, spec: ClusterSpec) -> Client:
    """A client of the running scheduler at ``address`` (not made the default one), its
    start bounded by ``spec.connect_timeout`` (+ :data:`HANDSHAKE_GRACE_S`); each way it
    can fail is a :class:`ClusterError` saying what to check."""
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, where = parse_address(address)
        if scheme != "inproc":  # the others are HOST:PORT
            parse_host_port(where)
    except ValueError as exc:
        raise ClusterError(
            f"{address!r} is not a Dask scheduler address ({exc}); give one as "
            "tcp://HOST:PORT (or tls://HOST:PORT)"
        ) from None
    security = client_security(spec.tls)
    if security is not None and address.startswith("tcp://"):
        raise ClusterError(
            f"scheduler address {address!r} is plain tcp:// but TLS certificates are "
            "configured; use the tls:// address of the scheduler"
        )
    try:
        # made the default client only once connected: a start given up (refused, no
        # answer) keeps trying in its thread, and a default client's constructor sets
        # dask's global scheduler, which would then name a client that never comes
        client = start_within(
            lambda: Client(
                address, security=security, timeout=spec.connect_timeout, set_as_default=False
            ),
            spec.connect_timeout + HANDSHAKE_GRACE_S,
            address,
        )
    except TypeError as exc:  # distributed's way of saying "tls:// without certificates"
        raise ClusterError(
            f"cannot connect to the Dask scheduler at {address!r}: it needs TLS but no "
            "certificates are configured; set cluster.tls (ca_file, cert, key)"
        ) from exc
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"cannot reach the Dask scheduler at {address!r} within "
            f"{spec.connect_timeout:g} s ({type(exc).__name__}: {exc}); is it running, "
            "and is the address (and TLS setting) right?"
        ) from exc
    except Refused:  # known at once: not the connect timeout's wait
        raise ClusterError(
            f"cannot reach the Dask scheduler at {address!r}: the connection is refused "
            "(nothing listens there); is it running, and is the address (and TLS setting) "
            "right?"
        ) from None
    except Unanswered:
        raise ClusterError(
            f"{address!r} accepted the connection but did not answer as a Dask scheduler "
            f"within {spec.connect_timeout + HANDSHAKE_GRACE_S:g} s: is it the scheduler's "
            "address (tcp://HOST:8786), not its dashboard's (:8787) or another service?"
        ) from None
    except MemoryError:  # another protocol's reply, its first bytes read as a length
        raise ClusterError(
            f"{address!r} answered, but not as a Dask scheduler (in another protocol: an "
            "HTTP server or proxy?): is it the scheduler's address (tcp://HOST:8786), and "
            "is the host reachable from here?"
        ) from None
    except ValueError as exc:  # a scheme distributed does not know
        raise ClusterError(
            f"cannot connect to {address!r} as a Dask scheduler ({type(exc).__name__}: "
            f"{str(exc)[:200]}): is it the scheduler's tcp:// (or tls://) address?"
        ) from None
    return client


def client_security(tls: TLSSpec | None) -> Security | None:
    """A client-side :class:`distributed.security.Security` for the certificate files."""
    if tls is None:
        return None
    tls.check_files()
    return Security(
        tls_ca_file=str(tls.ca_file),
        tls_client_cert=str(tls.cert),
        tls_client_key=None if tls.key is None else str(tls.key),
        require_encryption=True,
    )
