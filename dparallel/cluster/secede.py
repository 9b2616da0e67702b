"""A task's wait for object storage, outside its worker's thread pool.

Once a featurize task has computed its partition, writing it to a store at a URL is mostly
waiting for the service to take its objects. Dask's ``secede`` hands the task's thread
slot back, so the worker starts its next task (reads and computes) meanwhile; the task
still finishes, and its future completes, only after its last write (the done marker),
as before. At most one task per worker thread waits so at a time: a task that finds every
waiting slot of its worker taken waits for one inside the pool, so a worker never holds
more than twice the partitions it holds without this. Not done on a worker that is
closing (it waits only for the tasks in its pool), nor twice in one task.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["outside_the_pool"]

#: Each worker's waiting slots (a process may hold several workers: processes=False).
_SLOTS: weakref.WeakKeyDictionary[Any, threading.Semaphore] = weakref.WeakKeyDictionary()
_SLOTS_LOCK = threading.Lock()


@contextlib.contextmanager
def outside_the_pool(enabled: bool = True) -> Iterator[float]:
    """Run the block outside the Dask worker's thread pool (``enabled``, inside a task of
    a running worker, still in its pool; elsewhere the block just runs). Yields the
    seconds the task waited for a slot (0 where it did not secede)."""
    worker = _running_worker() if enabled else None
    if worker is None:
        yield 0.0
        return
    from distributed import secede

    t0 = time.perf_counter()
    with _slots(worker):
        waited = time.perf_counter() - t0
        if _is_running(worker):  # again: a closing worker's pool is being shut down
            secede()
        yield waited


def _running_worker() -> Any:
    """The running Dask worker whose task this thread runs inside its pool, or ``None``
    (no Dask loaded, not a task thread, seceded already, a closing worker)."""
    if "distributed" not in sys.modules:  # never in a worker: do not import it here
        return None
    from distributed import get_worker
    from distributed.threadpoolexecutor import thread_state as pool_thread
    from distributed.worker import thread_state as task_thread

    # a task (its key) on a thread still in the worker's pool (what ``secede`` leaves)
    if getattr(task_thread, "key", None) is None or not getattr(pool_thread, "proceed", False):
        return None
    try:
        worker = get_worker()
    except ValueError:
        return None
    return worker if _is_running(worker) else None


def _is_running(worker: Any) -> bool:
    return getattr(worker.status, "name", "") == "running"


def _slots(worker: Any) -> threading.Semaphore:
    """The worker's waiting slots, one per thread."""
    with _SLOTS_LOCK:
        found = _SLOTS.get(worker)
        if found is None:
            found = _SLOTS[worker] = threading.Semaphore(int(worker.state.nthreads or 1))
        return found
