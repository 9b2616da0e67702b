"""Preloaded by the warm server of local workers: that process ends without teardown.

The forkserver (:mod:`dparallel.cluster.warm_workers`) exits when the process that
started it does. Having imported distributed, numba and zarr, finalising its interpreter
took 1-2 s, and it holds the command's standard streams open meanwhile (a pipe reading
``dparallel``'s output waits for it). Importing this module in the server registers an
exit hook that flushes the standard streams and ends the server with ``os._exit(0)``;
worker processes forked from it inherit the hook, which does nothing there (their own
exit is :mod:`dparallel.cluster.worker_exit`'s business). Never import it elsewhere.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys

__all__: list[str] = []

_SERVER_PID = os.getpid()


def _exit_now() -> None:
    """In the process that imported this module (the server) only: exit at once."""
    if os.getpid() != _SERVER_PID:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(0)


atexit.register(_exit_now)
