"""A Ctrl-C that lands in a garbage-collector callback is raised again, not lost."""

from __future__ import annotations

import gc
import signal
import sys
import time

import pytest

from dparallel.cli._interrupts import interrupts_kept


def _interrupt_inside_a_gc_callback(seconds: float) -> None:
    """Raise KeyboardInterrupt (as a signal would) inside the next collection's callback,
    then run plain code for ``seconds``."""
    armed = [True]

    def callback(phase: str, info: dict) -> None:
        if armed:
            armed.clear()
            raise KeyboardInterrupt

    gc.callbacks.append(callback)
    try:
        gc.collect()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        gc.callbacks.remove(callback)


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler (a background job starts with SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_python_alone_loses_it(default_sigint) -> None:  # noqa: ANN001
    """Why the hook is needed: without it the interrupt is printed and dropped."""
    seen = []
    previous, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        _interrupt_inside_a_gc_callback(0.2)  # returns: nothing was raised
    finally:
        sys.unraisablehook = previous
    assert [u.exc_type for u in seen] == [KeyboardInterrupt]


def test_an_interrupt_raised_in_a_gc_callback_is_raised_again(default_sigint) -> None:  # noqa: ANN001
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), interrupts_kept():
        _interrupt_inside_a_gc_callback(10)
    assert time.monotonic() - t0 < 5  # at once, not after the plain code ran


def test_other_unraisable_exceptions_go_to_the_previous_hook() -> None:
    seen = []

    def record(unraisable: object) -> None:
        seen.append(unraisable)

    previous, sys.unraisablehook = sys.unraisablehook, record
    try:
        with interrupts_kept():
            sys.unraisablehook(type("U", (), {"exc_type": ValueError})())
        assert sys.unraisablehook is record  # restored
    finally:
        sys.unraisablehook = previous
    assert [u.exc_type for u in seen] == [ValueError]


def test_with_sigint_ignored_the_sigterm_handler_raises_it_again() -> None:
    """A background job ignores SIGINT; a SIGTERM (the CLI's handler raises KeyboardInterrupt)
    lost in a callback is raised again through that handler (interrupt_main of an ignored
    SIGINT did nothing: the run went on)."""

    def terminate(signum, frame):  # noqa: ANN001, ANN202
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, terminate)
    try:
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt), interrupts_kept():
            _interrupt_inside_a_gc_callback(10)
        assert time.monotonic() - t0 < 5
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
