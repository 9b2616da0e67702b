"""How batches reach the device: data held there or streamed, a prefetch thread, waiting.

:class:`BatchFeed` decides ``data_on_device``: the store's arrays held on the device
(:class:`HeldData`, batches assembled there by index) when they fit a budget, else streamed
from the store with host assembly — in a batch prefetch thread (:func:`prefetched`,
``batch_prefetch``) on a GPU, where each batch is pinned and copied with ``non_blocking`` on
a side stream, so the next batch is on the device while the step runs.
:meth:`BatchFeed.batches` yields every mini-batch, for training and evaluation, on the
device and counts the time spent waiting (:class:`WaitClock`, for ``data_wait_fraction``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dparallel.train.batch import (
    PartitionData,
    Rows,
    assemble_groups,
    batch_to,
    cast_batch,
    column_dtype,
    group_by_partition,
    make_batch,
    map_batch,
    merge_partitions,
    pin_batch,
    split_assembled,
)
from dparallel.train.data import BatchPlan, iterate_batches
from dparallel.train.device import Target, device_memory, gib, out_of_memory
from dparallel.train.gather_ops import DeviceOps, HostOps, PinnedOps, gather_threads
from dparallel.train.read_ahead import background

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, Iterator

    from dparallel.train.batch import Batch
    from dparallel.train.data import PartitionReader
    from dparallel.train.spec import TrainingSpec

log = logging.getLogger(__name__)

#: ``data_on_device: auto`` on a GPU: the arrays may take this share of its free memory
#: (the rest is for the model, optimizer state and a step's activations).
DEVICE_DATA_FRACTION = 0.5
#: Batches of data held on the device are assembled as many at a time as a copy of their
#: rows fits in this share of the device's free memory (after loading the data).
ASSEMBLY_FRACTION = 0.25
#: Batches a ``batch_prefetch: auto`` thread prepares ahead on a GPU (double buffering).
_GPU_BATCH_PREFETCH = 2


# ----------------------------------------------------------------- data held on the device
def _held(part: PartitionData, ops: DeviceOps, dtype: torch.dtype) -> PartitionData:
    """``part`` with every column on the device (floating ones in ``dtype``)."""

    def put(a: np.ndarray, cast: torch.dtype | None) -> torch.Tensor:
        t = ops.tensor(a)
        return t.to(cast) if cast is not None and t.is_floating_point() else t

    rows = {
        name: Rows(
            table.offsets,
            {col: put(a, column_dtype(name, col, dtype)) for col, a in table.columns.items()},
            table.refs,
            {k: put(a, dtype) for k, a in table.constant.items()},
        )
        for name, table in part.rows.items()
    }
    nbytes = sum(
        t.numel() * t.element_size() for table in rows.values() for t in table.columns.values()
    )
    return PartitionData(part.p, part.ids, part.split, rows, nbytes)


class HeldData:
    """Every partition of a store on one device, merged into one; batches assembled there.

    The partitions are merged (:func:`~dparallel.train.batch.merge_partitions`), so a batch
    is one gather per column whichever partitions its structures come from, and batches
    are assembled many at a time (``per_assembly`` structures: as many as a copy of their
    rows fits in :data:`ASSEMBLY_FRACTION` of the device's free memory, so the whole epoch
    on a GPU with room) and cut into views (:func:`~dparallel.train.batch.split_assembled`):
    the host launches a few device operations per batch, not a few per partition and
    column. The batches are those of the streamed path, structure for structure.
    """

    def __init__(
        self, reader: PartitionReader, data: PartitionData, first: dict[int, int],
        ops: DeviceOps, dtype: torch.dtype, per_assembly: int,
    ) -> None:  # fmt: skip
        self.reader, self.data, self.first, self.ops, self.dtype = reader, data, first, ops, dtype
        self.nbytes = data.nbytes
        self.per_assembly = max(1, per_assembly)

    def batches(self, plan: BatchPlan) -> Iterator[Batch]:
        """The batches of ``plan``, each assembled on the device."""
        pending: list[list[tuple[int, int]]] = []
        count = 0
        for items in plan:
            pending.append(items)
            count += len(items)
            if count >= self.per_assembly:
                yield from self._assembled(pending)
                pending, count = [], 0
        if pending:
            yield from self._assembled(pending)

    def _assembled(self, batches: list[list[tuple[int, int]]]) -> Iterator[Batch]:
        """``batches`` gathered at once, then cut into their :class:`Batch` es."""
        sel = np.concatenate(
            [self.first[p] + s for items in batches for p, s in group_by_partition(items)]
        )
        with torch.profiler.record_function("dparallel: gather batches on the device"):
            got = assemble_groups([(self.data, sel)], self.ops)
        for one in split_assembled(got, self.data, sel, [len(b) for b in batches], self.ops):
            yield make_batch(one, self.reader.elements, self.dtype, self.ops)

    @classmethod
    def load(
        cls, reader: PartitionReader, device: torch.device, dtype: torch.dtype, budget: int | None
    ) -> HeldData | None:
        """Every partition of ``reader``'s split index on ``device``, or None past ``budget``.

        ``budget`` (bytes; None = no limit) bounds what is held: partitions are loaded one
        by one and, once their total would pass it, released again (the caller then
        streams). Partitions are read straight from the store (not via the reader's cache),
        so the host holds at most one at a time.
        """
        ops = DeviceOps(device)
        parts: list[PartitionData] = []
        first: dict[int, int] = {}
        total = structures = 0
        for p in reader.index.partitions:
            part = _held(reader.load(p), ops, dtype)
            total += part.nbytes
            if budget is not None and total > budget:
                log.info(
                    "the store's arrays pass the device budget (%s after %d of %d "
                    "partitions): streaming them instead",
                    gib(budget), len(parts) + 1, len(reader.index.partitions),
                )  # fmt: skip
                return None
            parts.append(part)
            first[p] = structures
            structures += part.n_structures
        data = merge_partitions(parts, ops)
        per_structure = max(1, data.nbytes // max(1, data.n_structures))
        room = int(ASSEMBLY_FRACTION * device_memory(device)[0]) // per_structure
        return cls(reader, data, first, ops, dtype, min(data.n_structures, room))


# ----------------------------------------------------------------- the feed
@dataclass
class BatchFeed:
    """Where a run's data lives (held on the device or streamed) and how batches get there."""

    target: Target
    data_on_device: bool | str = False
    batch_prefetch: int | str = "auto"
    held: HeldData | None = None
    wait: WaitClock = field(default_factory=lambda: WaitClock())

    @property
    def device(self) -> torch.device:
        """The device batches are fed to."""
        return self.target.device

    def hold(self, reader: PartitionReader) -> None:
        """Hold the store's arrays on the device if ``data_on_device`` says so (and they fit).

        On the CPU ``auto`` streams: decoded partitions stay in RAM in the partition cache
        (``DPARALLEL_TRAIN_CACHE_MB``) and numpy assembly is as fast as gathering from
        tensors (docs/training.md); ``true`` holds them there too. A reader that cannot be
        held (structures for computed descriptors) streams.

        Raises
        ------
        DeviceError
            ``data_on_device: true`` and the arrays do not fit the device's memory.
        """
        if self.data_on_device is False or not reader.holdable:
            return
        if self.data_on_device == "auto" and self.device.type == "cpu":
            return
        budget = None
        if self.data_on_device is not True:  # auto: a share of the free memory
            budget = int(DEVICE_DATA_FRACTION * device_memory(self.device)[0])
        try:
            self.held = HeldData.load(reader, self.device, self.target.dtype, budget)
        except torch.OutOfMemoryError as exc:
            self.held = None
            raise out_of_memory(exc, self.device, None, "loading the store's arrays") from None
        if self.held is not None:
            log.info("training data held on %s: %s", self.device, gib(self.held.nbytes))

    def describe(self) -> dict[str, Any]:
        """Device, where the data lives and peak device memory (for ``metrics.json``)."""
        cuda = self.device.type == "cuda"
        return {
            "device": str(self.device),
            "data_on_device": self.held is not None,
            "data_bytes": self.held.nbytes if self.held is not None else None,
            "peak_memory_bytes": int(torch.cuda.max_memory_allocated(self.device))
            if cuda
            else None,
        }

    def batches(
        self, reader: PartitionReader, split: str, spec: TrainingSpec, *, epoch: int | None = None
    ) -> Generator[Batch, None, None]:
        """Mini-batches of ``split`` on the device: shuffled for ``epoch`` or in order (``None``).

        Evaluation takes batches of at least 64 structures, unshuffled. The time spent
        waiting for each batch is added to :attr:`wait`.
        """
        size = spec.batch_size if epoch is not None else max(64, spec.batch_size)
        plan = BatchPlan(
            reader.index, split, size, shuffle=epoch is not None, seed=spec.seed,
            epoch=epoch or 0, shuffle_buffer=spec.shuffle_buffer,
        )  # fmt: skip
        if self.held is not None:
            return timed(self.held.batches(plan), self.wait)
        depth = self.batch_prefetch
        if depth == "auto":
            depth = _GPU_BATCH_PREFETCH if self.device.type == "cuda" else 0
        dtype = self.target.dtype
        # through the prefetch thread a store's arrays (a holdable reader's) are copied in
        # their stored dtypes and cast once on the device; computed descriptors come in
        # ``dtype`` already
        late = int(depth) > 0 and reader.holdable
        # a store's batch for a CUDA copy is gathered straight into page-locked memory
        ops = (PinnedOps if late and self.device.type == "cuda" else HostOps)(gather_threads())
        host = iterate_batches(
            reader, plan, prefetch=spec.prefetch, dtype=None if late else dtype, ops=ops
        )
        if int(depth) > 0:
            ahead = prefetched(host, self.device, int(depth), dtype if late else None)
            return timed(ahead, self.wait)
        return timed(_moved(host, self.device), self.wait)


def _moved(batches: Iterable[Batch], device: torch.device) -> Generator[Batch, None, None]:
    """``batches`` on ``device``; none held here while the next is read."""
    for batch in batches:
        yield batch_to(batch, device)
        del batch


# ----------------------------------------------------------------- the batch prefetch thread
@dataclass
class WaitClock:
    """Seconds the consumer waited for the next batch, summed."""

    seconds: float = 0.0


def timed(batches: Iterable[Batch], clock: WaitClock) -> Generator[Batch, None, None]:
    """``batches``, adding the time each ``next`` took to ``clock``."""
    it = iter(batches)
    try:
        while True:
            t0 = time.perf_counter()
            with torch.profiler.record_function("dparallel: wait for the next batch"):
                batch = next(it, None)
            clock.seconds += time.perf_counter() - t0
            if batch is None:
                return
            yield batch
            del batch  # not held while the next one is read
    finally:
        getattr(it, "close", lambda: None)()


def prefetched(
    batches: Iterable[Batch], device: torch.device, depth: int = 2,
    dtype: torch.dtype | None = None,
) -> Generator[Batch, None, None]:  # fmt: skip
    """``batches`` from a background thread ``depth`` ahead, placed on ``device`` (floating
    tensors then cast to ``dtype`` there, if given)."""
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def place(batch: Batch) -> tuple[Batch, Any]:
        with torch.profiler.record_function("dparallel: pin and copy a batch to the device"):
            return _placed(batch)

    def _placed(batch: Batch) -> tuple[Batch, Any]:
        if stream is None:
            out = batch_to(batch, device)
            return (cast_batch(out, dtype) if dtype else out), None
        with torch.cuda.stream(stream):
            out = batch_to(pin_batch(batch), device, non_blocking=True)
            if dtype is not None:
                out = cast_batch(out, dtype)
            event = torch.cuda.Event()
            event.record(stream)
        return out, event

    with contextlib.closing(background(batches, depth, "dparallel-batches", place)) as placed:
        for batch, event in placed:
            if event is not None:
                _wait_on(batch, event)
            yield batch
            del batch, event  # not held while the next one is read


def _wait_on(batch: Batch, event: Any) -> None:
    """Make the current CUDA stream wait for ``batch``'s copy, and own its memory."""
    stream = torch.cuda.current_stream()
    stream.wait_event(event)

    def own(t: torch.Tensor) -> torch.Tensor:
        t.record_stream(stream)
        return t

    map_batch(batch, own)
