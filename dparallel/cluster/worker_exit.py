"""Worker preload: end a worker process without interpreter teardown after a normal close.

A worker process that imported torch, numba and zarr spends about a second at exit
(docs/deploy.md) finalising the interpreter (module teardown, C++ static destructors),
and every run that closes the local cluster it started waits for that. With this module
as a worker preload, once the worker has closed normally (its tasks have returned, so
their writes are on disk) an exit hook flushes logging and the standard streams and ends
the process with ``os._exit(0)``. Any other exit (an error, a kill) is left to Python as
usual.

Used through :func:`dparallel.cluster.connect` (``worker_preload=(FAST_EXIT_PRELOAD,)``)
by ``dparallel featurize`` and ``dparallel run`` on the local clusters they start.
"""

from __future__ import annotations

import atexit
from typing import Any

from dparallel._exit import exit_now

__all__ = ["FAST_EXIT_PRELOAD", "dask_setup", "exit_fast"]

#: Module name to pass as a Dask worker preload.
FAST_EXIT_PRELOAD = "dparallel.cluster.worker_exit"


def exit_fast(worker: Any) -> None:
    """atexit hook: ``os._exit(0)`` once ``worker`` has closed normally, else nothing."""
    if getattr(getattr(worker, "status", None), "name", None) != "closed":
        return  # not a normal close: let Python exit as usual (and keep its exit code)
    exit_now(0)


def dask_setup(worker: Any) -> None:
    """Dask preload hook: register :func:`exit_fast` for this worker's process."""
    atexit.register(exit_fast, worker)
