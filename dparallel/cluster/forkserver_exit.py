"""Preloaded by the forkserver of local workers: that process ends without teardown.

Having imported distributed, numba and zarr, the forkserver takes seconds to finalise its
interpreter (docs/deploy.md) while holding the command's standard streams open (a pipe
reading ``dparallel``'s output waits for it). Importing this module in the server
registers an exit hook that ends it with :func:`dparallel._exit.exit_now`; in the workers
forked from it the hook does nothing. Never import it elsewhere.
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
