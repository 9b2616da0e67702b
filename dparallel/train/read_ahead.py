"""Items made ahead in a daemon thread, a bounded number at a time: the partition read-ahead
(:mod:`dparallel.train.data`) and the batch prefetch (:mod:`dparallel.train.feed`).
"""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterable

__all__ = ["background"]

T = TypeVar("T")
_DONE = object()  # the end of a background thread's items


def background(
    items: Iterable[T], depth: int, name: str, fn: Callable[[T], Any] | None = None
) -> Generator[Any, None, None]:
    """``items`` (through ``fn``, if given) iterated in a daemon thread ``depth`` ahead.

    At most ``depth`` items are made and not yet taken (queued, or being made): the
    thread starts the next one only once the consumer has taken one, so a partition
    prefetch of 1 holds one partition ahead, not a second one waiting for room.
    An exception in the thread is raised here; closing the generator (the end, a
    ``break``, an error in the consumer) stops the thread, closes ``items`` and joins it.
    The thread starts with the first ``next``.
    """
    q: queue.Queue[Any] = queue.Queue()
    room = threading.Semaphore(max(1, depth))  # one per item made and not yet taken
    stop = threading.Event()

    def wait_for_room() -> bool:
        while not stop.is_set():
            if room.acquire(timeout=0.05):
                return True
        return False

    def work() -> None:
        it = iter(items)
        try:
            while wait_for_room():
                item: Any = next(it, _DONE)
                if item is _DONE:
                    q.put(_DONE)
                    return
                q.put(item if fn is None else fn(item))
                del item  # held by the queue only, until taken
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            q.put(exc)
        finally:
            getattr(it, "close", lambda: None)()

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    try:
        while (item := q.get()) is not _DONE:
            room.release()
            if isinstance(item, BaseException):
                raise item
            yield item
            del item  # not held while the next one is awaited
    finally:
        stop.set()
        thread.join(timeout=30)
