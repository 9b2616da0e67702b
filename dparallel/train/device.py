"""The compute device of training and evaluation: resolving it, its memory, its errors.

``device:`` is resolved once (:func:`~dparallel.nn.device.resolve_device`, shared with the
deployed model) and with the training dtype makes the run's :class:`Target` (the model is
moved there before an optimizer is built on it, so Adam's moments and the Kalman filter's
P follow its parameters). An out-of-memory error at a step becomes a
:class:`~dparallel.errors.DeviceError` saying how much was needed and free and what to
lower (:func:`out_of_memory`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from dparallel.errors import DeviceError
from dparallel.nn.device import resolve_device
from dparallel.train.batch import batch_nbytes

if TYPE_CHECKING:
    from dparallel.nn import HDNNP
    from dparallel.train.batch import Batch
    from dparallel.train.spec import TrainingSpec


def device_memory(device: torch.device) -> tuple[int, int]:
    """(free, total) bytes of ``device``'s memory (host RAM for the CPU, via psutil)."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return int(free), int(total)
    import psutil  # only here: not loaded with dparallel.train

    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


@dataclass(frozen=True)
class Target:
    """Where, and in which dtype, a run's model and batches compute."""

    dtype: torch.dtype
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def of(cls, spec: TrainingSpec) -> Target:
        """The target ``spec`` asks for (``spec.dtype``, ``spec.device``).

        Raises
        ------
        DeviceError
            CUDA asked for but absent.
        """
        dtype = torch.float64 if spec.dtype == "float64" else torch.float32
        return cls(dtype, resolve_device(spec.device))

    def model(self, model: HDNNP) -> HDNNP:
        """``model`` on this target (before an optimizer is built on its parameters)."""
        return model.to(device=self.device, dtype=self.dtype)


def gib(n: float) -> str:
    """``n`` bytes as messages say them: ``"1.25 GiB"``."""
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
        parts.append(f"{gib(free)} free of {gib(total)}")
    except Exception:  # noqa: BLE001 - the numbers are a courtesy, the advice is not
        pass
    if batch is not None:
        parts.append(
            f"the batch ({batch.n_structures} structures, {batch.n_atoms} atoms) holds "
            f"{gib(batch_nbytes(batch))}"
        )
    return DeviceError(
        "; ".join(parts) + ". Lower batch_size (--set batch_size=N), keep the data off the "
        "device (--set data_on_device=false), or train with float32 / a smaller network"
    )
