"""The compute device of training and evaluation: resolving it, moving batches, its errors.

``device: auto | cpu | cuda | cuda:N`` (``auto`` = CUDA when ``torch.cuda.is_available()``)
is resolved here, once, to a :class:`torch.device`; a CUDA device that is absent is a
:class:`~dparallel.errors.DeviceError` naming it and what is available. A batch moves with
:func:`batch_to` (``non_blocking`` from pinned memory, :func:`pin_batch`), and an out-of-
memory error at a step becomes a :class:`~dparallel.errors.DeviceError` saying how much was
needed and free and what to lower (:func:`out_of_memory`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from dparallel.errors import DeviceError
from dparallel.train.structure_data import ComputedBatch

if TYPE_CHECKING:
    from collections.abc import Callable

    from dparallel.descriptors import DescriptorResult
    from dparallel.train.data import Batch

__all__ = [
    "DEVICE_PATTERN",
    "available_devices",
    "batch_nbytes",
    "batch_to",
    "device_memory",
    "features_to",
    "map_batch",
    "out_of_memory",
    "peak_memory",
    "pin_batch",
    "resolve_device",
]

#: What a ``device`` setting may be.
DEVICE_PATTERN = r"^(auto|cpu|cuda|cuda:\d+)$"


def available_devices() -> str:
    """What this process can use, in words: ``"cpu"`` or ``"cpu, cuda:0 (NVIDIA H200)"``."""
    names = ["cpu"]
    if torch.cuda.is_available():
        names += [
            f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())
        ]
    return ", ".join(names)


def resolve_device(name: str | torch.device) -> torch.device:
    """The :class:`torch.device` of a ``device`` setting (``auto`` picks CUDA when present).

    Raises
    ------
    DeviceError
        A CUDA device asked for but absent (no CUDA, or fewer devices); names what is.
    """
    text = str(name)
    if not re.match(DEVICE_PATTERN, text):
        raise DeviceError(f"device {text!r}: expected auto, cpu, cuda or cuda:N")
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(text)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only torch build" if torch.version.cuda is None else "no CUDA device"
            raise DeviceError(
                f"device {text!r} asked for, but this process sees {build} "
                f"(torch {torch.__version__}); available: {available_devices()}. "
                "Use --device cpu (or device: auto)"
            )
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise DeviceError(
                f"device {text!r} asked for, but there are {torch.cuda.device_count()} CUDA "
                f"devices; available: {available_devices()}"
            )
    return device


def device_memory(device: torch.device) -> tuple[int, int]:
    """(free, total) bytes of ``device``'s memory (host RAM for the CPU, via psutil)."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return int(free), int(total)
    import psutil

    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


def peak_memory(device: torch.device) -> int | None:
    """Peak bytes allocated by torch on a CUDA ``device`` (None on the CPU)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return None


def _map_features(
    features: dict[str, DescriptorResult], fn: Callable[[torch.Tensor], torch.Tensor]
) -> dict[str, DescriptorResult]:
    out = {}
    for e, res in features.items():
        pairs = None
        if res.pairs is not None:
            pairs = {
                f: replace(
                    pd,
                    pair_first=fn(pd.pair_first),
                    pair_second=fn(pd.pair_second),
                    center=fn(pd.center),
                    vectors=fn(pd.vectors),
                    feature_index=fn(pd.feature_index),
                    dG_dr=fn(pd.dG_dr),
                )
                for f, pd in res.pairs.items()
            }
        out[e] = replace(res, values=fn(res.values), atom_index=fn(res.atom_index), pairs=pairs)
    return out


def map_batch(batch: Batch, fn: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
    """``batch`` with ``fn`` applied to each of its tensors (labels, features, pairs)."""
    return replace(
        batch,
        atom_counts=fn(batch.atom_counts),
        structure_index=fn(batch.structure_index),
        energy=fn(batch.energy),
        forces=fn(batch.forces),
        features=_map_features(batch.features, fn),
    )


def features_to(
    features: dict[str, DescriptorResult], device: torch.device
) -> dict[str, DescriptorResult]:
    """Descriptor results (values, atom rows, pair derivatives) on ``device``."""
    return _map_features(features, lambda t: t.to(device))


def batch_to(batch: Batch, device: torch.device, non_blocking: bool = False) -> Batch:
    """``batch`` with every tensor on ``device`` (itself when already there)."""
    if batch.energy.device == device:
        return batch
    if isinstance(batch, ComputedBatch):  # structures, pairs and the descriptor graph too
        return batch.to(device, non_blocking=non_blocking)
    return map_batch(batch, lambda t: t.to(device, non_blocking=non_blocking))


def pin_batch(batch: Batch) -> Batch:
    """``batch`` in page-locked host memory, so a copy to a CUDA device can be non-blocking."""
    return map_batch(batch, lambda t: t.pin_memory())


def batch_nbytes(batch: Batch) -> int:
    """Bytes of a batch's tensors (what a step holds on the device, before activations)."""
    sizes: list[int] = []

    def count(t: torch.Tensor) -> torch.Tensor:
        sizes.append(t.numel() * t.element_size())
        return t

    map_batch(batch, count)
    return sum(sizes)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def out_of_memory(
    exc: BaseException, device: torch.device, batch: Batch | None, where: str
) -> DeviceError:
    """A :class:`DeviceError` for ``torch.OutOfMemoryError`` ``exc`` raised at ``where``.

    Says how much the step tried to allocate (from torch's message), how much the device
    has free, the batch's own size, and what to lower.
    """
    text = str(exc)
    asked = re.search(r"[Tt]ried to allocate ([\d.]+ [KMGT]?i?B)", text)
    parts = [f"out of memory on {device} at {where}"]
    if asked:
        parts.append(f"it tried to allocate {asked.group(1)}")
    try:
        free, total = device_memory(device)
        parts.append(f"{_gib(free)} free of {_gib(total)}")
    except Exception:  # noqa: BLE001 - the numbers are a courtesy, the advice is not
        pass
    if batch is not None:
        parts.append(
            f"the batch ({batch.n_structures} structures, {batch.n_atoms} atoms) holds "
            f"{_gib(batch_nbytes(batch))}"
        )
    return DeviceError(
        "; ".join(parts) + ". Lower batch_size (--set batch_size=N), keep the data off the "
        "device (--set data_on_device=false), or train with float32 / a smaller network"
    )
