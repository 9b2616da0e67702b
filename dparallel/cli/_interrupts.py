"""A Ctrl-C is never lost: one that Python could not raise where it arrived is raised again.

A signal's ``KeyboardInterrupt`` is raised in whatever Python code the main thread runs
at that moment; inside a garbage-collector callback (Dask's GC diagnosis in the driver,
which hosts a local cluster's scheduler) or a weakref callback Python cannot raise it, so
it printed "Exception ignored in … KeyboardInterrupt" and the run went on to its end (seen
in `dparallel run` at the start of training and during export, 2 of 10 Ctrl-Cs).
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["interrupts_kept"]

#: How long after a lost interrupt it is raised again: time for the main thread to leave
#: the hook and the callback (raised in either, it would be lost again).
AGAIN_AFTER_S = 0.05


def _interrupt_soon() -> None:
    """In a thread of its own: interrupt the main thread as SIGINT would, shortly; as
    SIGTERM would where SIGINT is ignored (a background job) and SIGTERM has a Python
    handler (the CLI's raises the same KeyboardInterrupt): ``interrupt_main`` of an ignored
    signal does nothing."""
    time.sleep(AGAIN_AFTER_S)
    number = signal.SIGINT
    if not callable(signal.getsignal(signal.SIGINT)) and callable(signal.getsignal(signal.SIGTERM)):
        number = signal.SIGTERM
    _thread.interrupt_main(number)


@contextlib.contextmanager
def interrupts_kept() -> Iterator[None]:
    """In this block a ``KeyboardInterrupt`` that reaches ``sys.unraisablehook`` (raised in
    a callback Python cannot raise from) is raised again in the main thread a moment later
    (again if that lands in such a callback too), instead of being printed and lost; any
    other unraisable exception goes to the hook there was."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            _thread.start_new_thread(_interrupt_soon, ())  # not from here: lost in here
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        if sys.unraisablehook is hook:
            sys.unraisablehook = previous
