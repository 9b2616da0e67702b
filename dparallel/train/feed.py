"""Feeding batches to the device: a prefetch thread, double buffering, the time spent waiting.

:class:`Prefetcher` runs a batch iterator (host collation from streamed partitions) in a
background thread ``depth`` batches ahead; on a CUDA device each batch is pinned and copied
with ``non_blocking`` on a side stream, so the next batch is on the device while the step
runs. An exception in the thread is raised in the consumer; closing the prefetcher (the
end of the epoch, a ``break``, an error in the step) stops and joins the thread.

:class:`WaitClock` adds up the time the training thread waited for data, for
``data_wait_fraction`` (the share of an epoch's training pass spent waiting).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TYPE_CHECKING, Any

import torch

from dparallel.train.device import batch_to, pin_batch

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, Iterator

    from dparallel.train.data import Batch

__all__ = ["Prefetcher", "WaitClock", "timed"]

_DONE = object()


class WaitClock:
    """Seconds the consumer waited for the next batch, summed."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def reset(self) -> None:
        """Start a new count."""
        self.seconds = 0.0


def timed(batches: Iterable[Batch], clock: WaitClock) -> Generator[Batch, None, None]:
    """``batches``, adding the time each ``next`` took to ``clock``."""
    it = iter(batches)
    try:
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                clock.seconds += time.perf_counter() - t0
                return
            clock.seconds += time.perf_counter() - t0
            yield batch
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


class Prefetcher:
    """Iterate ``batches`` in a background thread, ``depth`` ahead, placed on ``device``."""

    def __init__(self, batches: Iterable[Batch], device: torch.device, depth: int = 2) -> None:
        self.device = device
        self._source = batches
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._cuda = device.type == "cuda"
        self._stream = torch.cuda.Stream(device) if self._cuda else None
        self._thread: threading.Thread | None = None  # started by the first iteration

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _place(self, batch: Batch) -> tuple[Batch, Any]:
        if not self._cuda:
            return batch_to(batch, self.device), None
        assert self._stream is not None
        with torch.cuda.stream(self._stream):
            out = batch_to(pin_batch(batch), self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self._stream)
        return out, event

    def _work(self) -> None:
        it = iter(self._source)
        try:
            for batch in it:
                if self._stop.is_set() or not self._put(self._place(batch)):
                    return
            self._put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            self._put(exc)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator[Batch]:
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(
                target=self._work, name="dparallel-batches", daemon=True
            )
            self._thread.start()
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                batch, event = item
                if event is not None:
                    _wait_on(batch, event)
                yield batch
        finally:
            self.close()

    def close(self) -> None:
        """Stop the thread and wait for it (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    @property
    def alive(self) -> bool:
        """Whether the thread still runs."""
        return self._thread is not None and self._thread.is_alive()


def _wait_on(batch: Batch, event: Any) -> None:
    """Make the current CUDA stream wait for ``batch``'s copy, and own its memory."""
    stream = torch.cuda.current_stream()
    stream.wait_event(event)
    from dparallel.train.device import map_batch

    def own(t: torch.Tensor) -> torch.Tensor:
        t.record_stream(stream)
        return t

    map_batch(batch, own)
