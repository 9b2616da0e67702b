"""A client's start within a bound: an address where nothing listens is known at once, one
that accepts connections keeps the whole timeout (real sockets on 127.0.0.1)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from dparallel.cluster.client_start import (
    FIRST_PROBE_S,
    REFUSED_FOR_S,
    Refused,
    Unanswered,
    refuses,
    start_within,
)

pytestmark = pytest.mark.timeout(60)


def _closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound once by us, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _never(stop: threading.Event) -> object:
    stop.wait(30)
    raise OSError("timed out")  # as Client(timeout=…) would, long after


def test_a_refused_address_is_given_up_at_once_not_after_the_timeout():
    address = f"tcp://127.0.0.1:{_closed_port()}"
    assert refuses(address)
    stop = threading.Event()
    t0 = time.monotonic()
    try:
        with pytest.raises(Refused):
            start_within(lambda: _never(stop), 30.0, address)
    finally:
        stop.set()
    elapsed = time.monotonic() - t0
    assert FIRST_PROBE_S + REFUSED_FOR_S <= elapsed < FIRST_PROBE_S + REFUSED_FOR_S + 1.5


def test_an_address_that_accepts_keeps_the_whole_timeout():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)  # accepted by the kernel, never answered: a scheduler slow to answer
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    stop = threading.Event()
    t0 = time.monotonic()
    try:
        assert not refuses(address)
        with pytest.raises(Unanswered):
            start_within(lambda: _never(stop), 3.0, address)
    finally:
        stop.set()
        server.close()
    assert 3.0 <= time.monotonic() - t0 < 6.0


def test_a_client_that_starts_is_returned_and_other_schemes_are_not_probed():
    address = f"tcp://127.0.0.1:{_closed_port()}"
    assert start_within(lambda: "client", 5.0, address) == "client"  # before any probe
    assert not refuses("inproc://127.0.0.1/1/2")

    def late() -> str:  # refused at first (a scheduler that starts), then there
        time.sleep(FIRST_PROBE_S + REFUSED_FOR_S / 2)
        return "client"

    assert start_within(late, 5.0, address) == "client"

    def fails() -> str:
        raise TypeError("tls:// without certificates")

    with pytest.raises(TypeError, match="without certificates"):
        start_within(fails, 5.0, address)


def test_a_client_made_after_it_was_given_up_is_closed():
    address = f"tcp://127.0.0.1:{_closed_port()}"
    closed = threading.Event()
    release = threading.Event()

    class Late:
        def close(self) -> None:
            closed.set()

    def late() -> Late:
        release.wait(30)
        return Late()

    with pytest.raises(Refused):
        start_within(late, 30.0, address)
    release.set()
    assert closed.wait(10)
