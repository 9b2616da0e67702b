"""Preloaded by the forkserver of local workers: that process ignores Ctrl-C and ends
without teardown.

Having imported distributed, numba and zarr, the forkserver takes seconds to finalise its
interpreter (docs/deploy.md) while holding the command's standard streams open (a pipe
reading ``dparallel``'s output waits for it). Importing this module in the server
registers an exit hook that ends it with :func:`dparallel._exit.exit_now`; in the workers
forked from it the hook does nothing. It also ignores SIGINT from here on, first of its
preload: a terminal's Ctrl-C reaches every process of the command (the command closes its
cluster and the server), and the workers forked from it inherit that
(:func:`dparallel.cluster.worker_exit.ignore_interrupts`). Never import it elsewhere.
"""

from __future__ import annotations

import atexit
import os

from dparallel._exit import exit_now
from dparallel.cluster.worker_exit import ignore_interrupts

__all__: list[str] = []

_SERVER_PID = os.getpid()


def _exit_if_server() -> None:
    """In the process that imported this module (the server) only: exit at once."""
    if os.getpid() == _SERVER_PID:
        exit_now(0)


ignore_interrupts()
atexit.register(_exit_if_server)
