"""Worker preload of local clusters: ignore Ctrl-C, and end the process without
interpreter teardown after a normal close.

A worker that imported torch, numba and zarr spends about a second finalising the
interpreter (docs/deploy.md), and a run closing its local cluster waits for it. Once the
worker has closed normally (its tasks returned, their writes on disk) an exit hook
flushes logging and the streams and ends the process with ``os._exit(0)``; any other exit
is left to Python. A terminal's Ctrl-C reaches every process of the command, its local
workers too: they ignore it (the command closes its cluster) instead of each printing a
``KeyboardInterrupt`` traceback over the command's one line and being restarted.
"""

from __future__ import annotations

import atexit
import signal
import threading
from typing import Any

from dparallel._exit import exit_now

__all__ = ["FAST_EXIT_PRELOAD", "dask_setup", "exit_fast", "ignore_interrupts"]

#: Module name to pass as a Dask worker preload.
FAST_EXIT_PRELOAD = "dparallel.cluster.worker_exit"


def ignore_interrupts() -> None:
    """Ignore SIGINT in this process from now on (from its main thread; else nothing)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_fast(worker: Any) -> None:
    """atexit hook: ``os._exit(0)`` once ``worker`` has closed normally, else nothing."""
    if getattr(getattr(worker, "status", None), "name", None) != "closed":
        return  # not a normal close: let Python exit as usual (and keep its exit code)
    exit_now(0)


def dask_setup(worker: Any) -> None:
    """Dask preload hook: ignore Ctrl-C (a spawned worker; a forked one already does) and
    register :func:`exit_fast` for this worker's process."""
    ignore_interrupts()
    atexit.register(exit_fast, worker)
