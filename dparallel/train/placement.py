"""Where training tensors live: the one place the device is chosen and data is placed.

:meth:`Placement.of` resolves ``spec.device`` (``auto`` = CUDA when present) and the
training dtype; :meth:`Placement.model` moves the network there (the optimizer, built after
it, and a resumed optimizer state, loaded into it, follow its parameters — Adam's moments
and the Kalman filter's P alike). :meth:`Placement.load_data` decides ``data_on_device``:
the store's arrays held on the device (:mod:`~dparallel.train.resident`, batches gathered
there by index) when they fit a budget, else streamed from the store with host collation in
a batch prefetch thread on a GPU (:mod:`~dparallel.train.feed`). :meth:`Placement.batches`
yields every mini-batch, for training and evaluation, on the device and counts the time
spent waiting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from dparallel.train.data import BatchPlan, iterate_batches
from dparallel.train.device import (
    batch_to,
    device_memory,
    out_of_memory,
    peak_memory,
    resolve_device,
)
from dparallel.train.feed import Prefetcher, WaitClock, timed
from dparallel.train.resident import ResidentData, load_resident
from dparallel.train.structure_data import StructureReader

if TYPE_CHECKING:
    from collections.abc import Generator

    from dparallel.nn import HDNNP
    from dparallel.train.data import Batch, PartitionReader
    from dparallel.train.spec import TrainingSpec

__all__ = ["BATCH_PREFETCH_ON_CPU", "DEVICE_DATA_FRACTION", "Placement"]

log = logging.getLogger(__name__)

#: ``data_on_device: auto`` on a GPU: the arrays may take this share of its free memory
#: (the rest is for the model, optimizer state and a step's activations).
DEVICE_DATA_FRACTION = 0.5
#: Collate streamed batches in a prefetch thread on the CPU too. Off: on the CPU the step
#: and the collation share the cores (and the GIL), and the partition prefetch thread of
#: :meth:`~dparallel.train.data.PartitionReader.stream` already reads ahead.
BATCH_PREFETCH_ON_CPU = False


@dataclass
class Placement:
    """The dtype and device of a run's model and batches, and where its data lives."""

    dtype: torch.dtype
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    data_on_device: bool | str = False
    resident: ResidentData | None = None
    wait: WaitClock = field(default_factory=WaitClock)

    @classmethod
    def of(cls, spec: TrainingSpec) -> Placement:
        """The placement ``spec`` asks for (``spec.dtype``, ``spec.device``).

        Raises
        ------
        DeviceError
            CUDA asked for but absent.
        """
        dtype = torch.float64 if spec.dtype == "float64" else torch.float32
        return cls(dtype, resolve_device(spec.device), spec.data_on_device)

    def model(self, model: HDNNP) -> HDNNP:
        """``model`` in this placement (before an optimizer is built on its parameters)."""
        return model.to(device=self.device, dtype=self.dtype)

    def data_budget(self) -> int:
        """Bytes the store's arrays may take on a GPU under ``data_on_device: auto``."""
        free, _ = device_memory(self.device)
        return int(DEVICE_DATA_FRACTION * free)

    def load_data(self, reader: PartitionReader) -> None:
        """Hold the store's arrays on the device if ``data_on_device`` says so (and they fit).

        On the CPU ``auto`` streams: decoded partitions stay in RAM in the partition cache
        (``DPARALLEL_TRAIN_CACHE_MB``) and numpy collation is as fast as gathering from
        tensors (docs/training.md); ``true`` holds them there too.

        Raises
        ------
        DeviceError
            ``data_on_device: true`` and the arrays do not fit the device's memory.
        """
        if self.data_on_device is False or isinstance(reader, StructureReader):
            return  # computed descriptors: the structures stream (their pairs are cached)
        if self.data_on_device == "auto" and self.device.type == "cpu":
            return
        budget = None if self.data_on_device is True else self.data_budget()
        try:
            self.resident = load_resident(reader, self.device, self.dtype, budget)
        except torch.OutOfMemoryError as exc:
            self.resident = None
            raise out_of_memory(exc, self.device, None, "loading the store's arrays") from None
        if self.resident is not None:
            log.info(
                "training data held on %s: %.3f GiB", self.device, self.resident.nbytes / 2**30
            )

    def describe(self) -> dict[str, Any]:
        """Device, where the data lives and peak device memory (for ``metrics.json``)."""
        return {
            "device": str(self.device),
            "data_on_device": self.resident is not None,
            "data_bytes": self.resident.nbytes if self.resident is not None else None,
            "peak_memory_bytes": peak_memory(self.device),
        }

    def batches(
        self,
        reader: PartitionReader,
        split: str,
        spec: TrainingSpec,
        *,
        epoch: int | None = None,
    ) -> Generator[Batch, None, None]:
        """Mini-batches of ``split`` on the device: shuffled for ``epoch`` or in order (``None``).

        Evaluation takes batches of at least 64 structures, unshuffled. The time spent
        waiting for each batch is added to :attr:`wait`.
        """
        if epoch is None:
            size, shuffle, ep = max(64, spec.batch_size), False, 0
        else:
            size, shuffle, ep = spec.batch_size, True, epoch
        if self.resident is not None:
            plan = BatchPlan(
                reader.index, split, size, shuffle=shuffle, seed=spec.seed, epoch=ep,
                shuffle_buffer=spec.shuffle_buffer,
            )  # fmt: skip
            return timed(self.resident.batches(plan), self.wait)
        host = iterate_batches(
            reader, split, size, shuffle=shuffle, seed=spec.seed, epoch=ep,
            shuffle_buffer=spec.shuffle_buffer, prefetch=spec.prefetch, dtype=self.dtype,
        )  # fmt: skip
        if spec.prefetch > 0 and (self.device.type != "cpu" or BATCH_PREFETCH_ON_CPU):
            return timed(Prefetcher(host, self.device), self.wait)
        return timed((batch_to(b, self.device) for b in host), self.wait)
