"""A task's wait for object storage, outside its worker's thread pool.

Once a featurize task has computed its partition, writing it to a store at a URL is mostly
waiting for the service to take its objects. Dask's ``secede`` hands the task's thread
slot back, so the worker starts its next task (reads and computes) meanwhile; the task
still finishes, and its future completes, only after its last write (the done marker),
as before. At most one task per worker thread waits so at a time: a task that finds every
waiting slot taken waits for one inside the pool, so a worker never holds more than
twice the partitions it holds without this.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["outside_the_pool"]


@contextlib.contextmanager
def outside_the_pool(enabled: bool = True) -> Iterator[None]:
    """Run the block outside the Dask worker's thread pool (``enabled`` and inside a
    task on a worker; elsewhere the block just runs)."""
    worker = _running_worker() if enabled else None
    if worker is None:
        yield
        return
    from distributed import secede

    with _slots(int(getattr(worker.state, "nthreads", 1) or 1)):
        secede()
        yield


def _running_worker() -> Any:
    """The Dask worker whose task this thread runs, or ``None`` (no Dask loaded, not a
    worker's task thread)."""
    if "distributed" not in sys.modules:  # never in a worker: do not import it here
        return None
    from distributed import get_worker
    from distributed.threadpoolexecutor import thread_state as pool_thread
    from distributed.worker import thread_state as task_thread

    # a task (its key) on a thread of the worker's pool (what ``secede`` takes it out of)
    if getattr(task_thread, "key", None) is None or not hasattr(pool_thread, "executor"):
        return None
    try:
        return get_worker()
    except ValueError:
        return None


@functools.cache
def _slots(n: int) -> threading.Semaphore:
    """The process's waiting slots (one per worker thread; one worker per process)."""
    return threading.Semaphore(n)
