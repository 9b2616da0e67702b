"""Host memory of streamed training: does a run fit?

:func:`check_host_memory` estimates, before the first epoch, the least a streamed run
holds at once and stops a run that clearly cannot fit the available memory, where the
kernel would otherwise kill it without a message.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from dparallel.errors import HostMemoryError
from dparallel.train.device import device_memory, gib
from dparallel.train.heap import trim_heap

if TYPE_CHECKING:
    from dparallel.train.data import PartitionReader
    from dparallel.train.spec import TrainingSpec

log = logging.getLogger(__name__)

#: Evaluation (validation, test) takes batches of at least this many structures.
EVAL_BATCH = 64
#: A run whose estimate passes this share of the available memory gets a warning.
WARN_SHARE = 0.8


@dataclass(frozen=True)
class HostEstimate:
    """The least host memory a streamed run holds at once, in bytes, and its parts."""

    partition: int  # the largest partition, decoded
    partitions: int  # partitions held at once (buffer, prefetch, cache), at least
    batch: int  # the largest batch (training or evaluation)
    available: int

    @property
    def total(self) -> int:
        """Bytes the run needs besides what the process holds already."""
        return self.partition * self.partitions + self.batch


def estimate_host_memory(
    reader: PartitionReader, spec: TrainingSpec, cache_bytes: int
) -> HostEstimate:
    """A lower bound of a streamed run's host memory, from one decoded partition.

    The smallest partition is decoded (through the reader's cache) to measure bytes per
    atom; the largest partition, a batch and the partitions held at once follow from the
    split index's counts. Lower bound: a partition's structures are counted at its
    largest, a batch in the stored dtypes (a float64 batch of float32 data is twice it).
    """
    index = reader.index
    atoms = {p: index.atoms.get(p, 0) for p in index.partitions}
    sample = min(index.partitions, key=lambda p: atoms[p])
    per_atom = reader.get(sample).nbytes / max(1, atoms[sample])
    if not reader.caches(sample):
        trim_heap()
    largest = int(per_atom * max(atoms.values()))
    structures = [len(index.ids[p]) for p in index.partitions]
    per_structure = per_atom * sum(atoms.values()) / max(1, sum(structures))
    train = len(index.partitions_with("train"))
    # the shuffle buffer's structures, then one partition (+ the one it fills from), and
    # `prefetch` read ahead
    buffered = math.ceil(max(spec.shuffle_buffer, spec.batch_size) / max(1, *structures)) + 1
    held = min(train, buffered + spec.prefetch)
    total_data = int(per_atom * sum(atoms.values()))
    if cache_bytes > 0:  # the cache keeps what fits it (every split's partitions)
        held = max(held, min(total_data, cache_bytes) // max(1, largest))
    evaluated = max(index.count("validation"), index.count("test"))
    batch = int(per_structure * max(spec.batch_size, min(EVAL_BATCH, evaluated)))
    return HostEstimate(largest, held, batch, device_memory(torch.device("cpu"))[0])


def check_host_memory(reader: PartitionReader, spec: TrainingSpec, cache_bytes: int) -> None:
    """Raise if a streamed run clearly cannot fit the available host memory; warn if near.

    Raises
    ------
    HostMemoryError
        The lower bound of :func:`estimate_host_memory` passes the available memory.
    """
    est = estimate_host_memory(reader, spec, cache_bytes)
    if est.total <= WARN_SHARE * est.available:
        return
    what = (
        f"a streamed run holds at least {gib(est.total)} of data at once "
        f"({est.partitions} decoded partitions of up to {gib(est.partition)} for "
        f"the shuffle buffer ({spec.shuffle_buffer} structures), `prefetch` "
        f"({spec.prefetch}) and the partition cache, and a batch of "
        f"{gib(est.batch)}), and {gib(est.available)} of host memory is available"
    )
    fix = (
        "lower `shuffle_buffer`, `prefetch` or `batch_size`, set DPARALLEL_TRAIN_CACHE_MB "
        "lower (0: no cache), or featurize with smaller partitions (--partition-atoms)"
    )
    if est.total > est.available:
        raise HostMemoryError(f"{reader.store.target}: {what}: {fix}")
    log.warning("%s: %s; the run may run out of host memory: %s", reader.store.target, what, fix)
