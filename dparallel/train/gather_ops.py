"""How :func:`~dparallel.train.batch.assemble` gathers a batch's columns: with numpy on the
host (:class:`HostOps`, on gather threads; :class:`PinnedOps` into page-locked memory for
a CUDA copy) for streamed partitions, or with tensors on the device (:class:`DeviceOps`)
for partitions held there. Each op set also makes the index arithmetic of an assembly.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "GATHER_TASK_BYTES",
    "HOST",
    "MAX_GATHER_THREADS",
    "DeviceOps",
    "Gather",
    "HostOps",
    "PinnedOps",
    "gather_threads",
]


#: A host gather is cut into tasks of about this many bytes of output: the gather threads
#: share a batch's large columns evenly, and a cast goes through a temporary this small.
GATHER_TASK_BYTES = 8 << 20
#: Host gather threads at most (the gathers are bound by memory bandwidth).
MAX_GATHER_THREADS = 8


def gather_threads() -> int:
    """Threads a host assembly gathers with: the cores this process may use, at most
    :data:`MAX_GATHER_THREADS`."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_GATHER_THREADS, cores or 1))


class HostOps:
    """Index arithmetic and gathers of :func:`assemble` on numpy arrays (streamed
    partitions), with ``threads`` gather threads (numpy's ``take`` releases the GIL),
    started at the first gather and stopped by :meth:`close`."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = max(1, int(threads))
        self._pool: ThreadPoolExecutor | None = None

    def tensor(self, a: Any) -> torch.Tensor:
        return torch.from_numpy(a) if isinstance(a, np.ndarray) else a

    def arange(self, n: int) -> Any:
        return np.arange(n, dtype=np.int64)

    def full(self, n: int, value: int) -> Any:
        return np.full(n, value, np.int64)

    def cat(self, parts: list) -> Any:
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def repeat(self, values: np.ndarray, counts: np.ndarray) -> Any:
        return np.repeat(values, counts)

    def ranges(self, starts: np.ndarray, stops: np.ndarray) -> Any:
        """Concatenation of arange(a, b) for each (a, b), vectorised, int64."""
        lengths = (stops - starts).astype(np.int64)
        before = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        return self.repeat(starts - before, lengths) + self.arange(int(lengths.sum()))

    def renumber(self, n_rows: int, rows: Any, base: int) -> Any:
        """(n_rows,) batch row of each local row (``rows`` → base, base + 1, …; −1 elsewhere)."""
        out = self.full(n_rows, -1)
        out[rows] = base + self.arange(rows.shape[0])
        return out

    def empty(self, n: int, like: Any, dtype: torch.dtype | None) -> Any:
        """An uninitialised (n, …) column shaped as ``like``'s rows (``dtype``: else its own)."""
        np_dtype = like.dtype if dtype is None else torch.empty(0, dtype=dtype).numpy().dtype
        return np.empty((n, *like.shape[1:]), np_dtype)

    def gathers(self, values: Any, rows: Any, out: Any, numbering: Any = None) -> list[Gather]:
        """Tasks that together set ``out = values[rows]`` (then ``numbering[...]`` of it, for
        an index column), cast to ``out``'s dtype; each about :data:`GATHER_TASK_BYTES`."""
        dst = out.numpy() if isinstance(out, torch.Tensor) else out
        n = int(rows.shape[0])
        pieces = max(1, -(-dst.nbytes // GATHER_TASK_BYTES))

        def task(a: int, b: int) -> Gather:
            def gather() -> None:
                # mode="clip": no bounds check, and out is written in place (numpy buffers
                # an out of mode "raise"); the rows come from the partition's own offsets
                if numbering is not None:
                    got = np.take(values, rows[a:b], axis=0, mode="clip")
                    if numbering.dtype == dst.dtype:
                        np.take(numbering, got, axis=0, out=dst[a:b], mode="clip")
                    else:  # an index column stored narrower than the int64 numbering
                        dst[a:b] = np.take(numbering, got, axis=0, mode="clip")
                elif values.dtype == dst.dtype:
                    np.take(values, rows[a:b], axis=0, out=dst[a:b], mode="clip")
                else:  # a cast (a float32 column of a float64 batch)
                    dst[a:b] = np.take(values, rows[a:b], axis=0, mode="clip")

            return Gather(gather, dst[a:b].nbytes)

        edges = [n * k // pieces for k in range(pieces + 1)]
        return [task(a, b) for a, b in itertools.pairwise(edges) if b > a]

    def run(self, tasks: list[Gather]) -> None:
        """Run ``tasks``: in this thread when they write less than a few tasks' bytes
        together (a thread's hand-off costs more than such a gather), else on the gather
        threads, in bins of at most :data:`GATHER_TASK_BYTES` each (or one larger task)."""
        total = sum(task.nbytes for task in tasks)
        if self.threads == 1 or total < 2 * GATHER_TASK_BYTES:
            for task in tasks:
                task.run()
            return
        bins: list[list[Gather]] = [[]]
        filled = 0
        for task in tasks:
            if filled and filled + task.nbytes > GATHER_TASK_BYTES:
                bins.append([])
                filled = 0
            bins[-1].append(task)
            filled += task.nbytes
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="dparallel-gather")
        for done in self._pool.map(_run_all, bins):
            del done

    def close(self) -> None:
        """Stop the gather threads (if any were started)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


@dataclass(frozen=True)
class Gather:
    """One gather task of an assembly and the bytes it writes."""

    run: Callable[[], None]
    nbytes: int


def _run_all(tasks: list[Gather]) -> None:
    """Run a bin of gather tasks in order (on a gather thread)."""
    for task in tasks:
        task.run()


#: :func:`assemble` on the host, in the calling thread.
HOST = HostOps()


class PinnedOps(HostOps):
    """:class:`HostOps` that gathers a batch's columns straight into page-locked memory
    (torch's caching host allocator), so its copy to a CUDA device needs no staging copy
    and does not block."""

    def empty(self, n: int, like: Any, dtype: torch.dtype | None) -> Any:
        torch_dtype = dtype or torch.from_numpy(np.empty(0, like.dtype)).dtype
        return torch.empty((n, *like.shape[1:]), dtype=torch_dtype, pin_memory=True)


class DeviceOps(HostOps):
    """Index arithmetic on ``device`` (partitions held there): only offsets on the host.

    Every per-row index is made on the device (``repeat_interleave`` with a size known on
    the host, so no synchronisation). Host arrays go to a CUDA device from pinned memory
    without blocking: a copy from pageable memory would wait for the device's queued work.
    """

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.pinned = device.type == "cuda"

    def tensor(self, a: Any) -> torch.Tensor:
        if not isinstance(a, np.ndarray):
            return a.to(self.device)
        t = torch.from_numpy(np.ascontiguousarray(a))
        if self.pinned:
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)

    def arange(self, n: int) -> Any:
        return torch.arange(n, device=self.device)

    def full(self, n: int, value: int) -> Any:
        return torch.full((n,), value, dtype=torch.int64, device=self.device)

    def cat(self, parts: list) -> Any:
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def repeat(self, values: np.ndarray, counts: np.ndarray) -> Any:
        total = int(counts.sum())
        return torch.repeat_interleave(
            self.tensor(values.astype(np.int64)), self.tensor(counts), output_size=total
        )

    def empty(self, n: int, like: Any, dtype: torch.dtype | None) -> Any:
        return torch.empty((n, *like.shape[1:]), dtype=dtype or like.dtype, device=self.device)

    def gathers(self, values: Any, rows: Any, out: Any, numbering: Any = None) -> list[Gather]:
        def gather() -> None:
            if numbering is not None and numbering.dtype == out.dtype:
                torch.index_select(numbering, 0, values.index_select(0, rows), out=out)
            elif numbering is not None:
                out.copy_(numbering.index_select(0, values.index_select(0, rows)))
            elif values.dtype == out.dtype:
                torch.index_select(values, 0, rows, out=out)
            else:
                out.copy_(values.index_select(0, rows))

        return [Gather(gather, out.numel() * out.element_size())]
