"""Preloaded by the forkserver of local workers: that process ends without teardown.

The forkserver (:mod:`dparallel.cluster.forkserver`) exits when the process that started
it does. Having imported distributed, numba and zarr, finalising its interpreter takes
seconds (docs/deploy.md), and it holds the command's standard streams open meanwhile (a
pipe reading ``dparallel``'s output waits for it). Importing this module in the server
registers an exit hook that ends the server with :func:`dparallel._exit.exit_now`; worker
processes forked from it inherit the hook, which does nothing there (their own exit is
:mod:`dparallel.cluster.worker_exit`'s business). Never import it elsewhere.
"""

from __future__ import annotations

import atexit
import os

from dparallel._exit import exit_now

__all__: list[str] = []

_SERVER_PID = os.getpid()


def _exit_if_server() -> None:
    """In the process that imported this module (the server) only: exit at once."""
    if os.getpid() == _SERVER_PID:
        exit_now(0)


atexit.register(_exit_if_server)
