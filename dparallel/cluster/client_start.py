"""Start a client of a running scheduler within a bound; an address where nothing listens
is known at once, not after the connect timeout.

distributed's ``connect`` retries a refused connection until its timeout: right for a
scheduler that is about to listen, ten seconds of nothing for an address where none runs
(a typo, a stale scheduler file, a scheduler that ended). :func:`start_within` waits for
the client; when it is not there after :data:`FIRST_PROBE_S`, it asks the address itself
(a plain TCP connection, closed at once) and gives up with :class:`Refused` once that has
been refused for :data:`REFUSED_FOR_S`. An address that accepts connections, or does not
answer at all, keeps the whole timeout: only a refusal is fast.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["FIRST_PROBE_S", "REFUSED_FOR_S", "Refused", "Unanswered", "start_within"]

#: Seconds a client may take before the address is asked (a live scheduler's is there).
FIRST_PROBE_S = 0.5
#: Seconds of refused connections after which nothing listens (a restart is quicker).
REFUSED_FOR_S = 1.0
_PROBE_TIMEOUT_S = 1.0  # one probe; a probe that times out is no refusal

T = TypeVar("T")


class Unanswered(Exception):
    """The call did not return in time."""


class Refused(Exception):
    """Every connection to the address was refused for :data:`REFUSED_FOR_S`."""


def start_within(make: Callable[[], T], seconds: float, address: str) -> T:
    """``make()`` (a client of the scheduler at ``address``) in a daemon thread, given up
    after ``seconds`` (:class:`Unanswered`), or as soon as the address refuses connections
    for :data:`REFUSED_FOR_S` (:class:`Refused`); the thread is left to end with the
    process, and a client it makes after all is closed. Its exception is raised here."""
    done: Future[T] = Future()

    def run() -> None:
        try:
            done.set_result(make())
        except BaseException as exc:  # noqa: BLE001 - raised in the caller
            done.set_exception(exc)

    threading.Thread(target=run, name="dparallel-client-start", daemon=True).start()
    t0 = time.monotonic()
    with contextlib.suppress(FutureTimeout):
        return done.result(timeout=min(FIRST_PROBE_S, seconds))
    refused_since: float | None = None
    while refuses(address) and time.monotonic() - t0 < seconds:
        if refused_since is None:
            refused_since = time.monotonic()
        if time.monotonic() - refused_since >= REFUSED_FOR_S and not done.done():
            done.add_done_callback(_close_late)
            raise Refused
        with contextlib.suppress(FutureTimeout):
            return done.result(timeout=0.1)
    try:
        return done.result(timeout=max(0.0, seconds - (time.monotonic() - t0)))
    except FutureTimeout:
        done.add_done_callback(_close_late)
        raise Unanswered from None


def _close_late(done: Future[Any]) -> None:
    """Close what ``make()`` returned after :func:`start_within` gave it up."""
    if done.exception() is None and hasattr(done.result(), "close"):
        done.result().close()


def refuses(address: str) -> bool:
    """Whether a TCP connection to the ``tcp://`` or ``tls://`` ``address`` is refused now
    (False for any other answer, a timeout or another scheme)."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, where = parse_address(address)
    if scheme not in ("tcp", "tls"):
        return False
    try:
        with socket.create_connection(parse_host_port(where), timeout=_PROBE_TIMEOUT_S):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:  # a timeout, a name that does not resolve: the client says what
        return False
