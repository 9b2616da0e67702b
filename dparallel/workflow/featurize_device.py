"""Where a featurize task computes: on its worker's GPU when it has one, else on the CPU.

A worker advertising the Dask resource ``GPU`` (:mod:`dparallel.cluster.gpus`) computes
on ``"cuda"`` when torch sees a CUDA device there; without one it says so in the log and
computes on the CPU, with the same numbers as a CPU worker. The computation on the
device goes through :data:`DEVICE_ENGINES`: the GPU featurize engines (registered: ACSF on
the Triton kernel, :func:`triton_descriptors`), which must return
:func:`~dparallel.workflow.featurize_task.task_descriptors`'s arrays (the store's layout:
dG/dr split and in the store's precision). While no engine takes a set, the task
computes it on the CPU and logs why.

:func:`triton_descriptors` computes an ACSF-only descriptor set on the worker's device
through ``ACSF.compute_arrays(backend=Backend("triton", device=…))``: the same keys,
dtypes, shapes and pair order as the CPU route. It declines (``None``: the task computes on
the CPU) a set with another descriptor type (neighbour sums), a set whose CPU route is not
the compiled kernel (no numba), and a device the kernel cannot run on (no triton, no CUDA
device); a partition too large for the device's memory is computed on the CPU (logged).
It imports torch and triton only when it computes.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from dparallel.errors import BackendUnavailableError
from dparallel.store._derivatives import DERIVATIVE_DTYPE

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.neighbors import Neighbors
    from dparallel.types import StructureBatch

__all__ = ["DEVICE_ENGINES", "device_descriptors", "task_device", "triton_descriptors"]

log = logging.getLogger(__name__)


def triton_descriptors(
    batch: StructureBatch, dset: DescriptorSet, neighbors: Neighbors, device: str
) -> dict[str, dict[str, dict[str, np.ndarray]]] | None:
    """``task_descriptors(batch, dset, neighbors)``'s arrays computed by the Triton ACSF
    kernel on ``device``; ``None`` for a set or a device it cannot take."""
    from dparallel.descriptors import ACSF, Backend
    from dparallel.descriptors._acsf_backends import triton_runs_on

    (descriptor, *others) = dset.by_name.values()
    # ACSF alone, computed on the CPU by the compiled kernel: the layout reproduced here
    if others or not isinstance(descriptor, ACSF) or dset.uses_torch:
        return None
    if not triton_runs_on(device):
        return None
    import torch

    try:
        return dset.compute(
            batch, neighbors, str(DERIVATIVE_DTYPE), True, Backend("triton", device=device)
        )
    except (BackendUnavailableError, torch.cuda.OutOfMemoryError) as exc:
        log.warning("Triton ACSF on %r: %s: featurizing this partition on the CPU", device, exc)
        return None


#: ``{name: engine}``; ``engine(batch, dset, neighbors, device)`` returns the set's store
#: arrays computed on ``device``, or ``None`` when it cannot take this set (the next engine
#: is asked; none: the CPU). ``"triton"``: ACSF on the Triton kernel
#: (:func:`triton_descriptors`).
DEVICE_ENGINES: dict[
    str, Callable[[StructureBatch, DescriptorSet, Neighbors, str], dict[str, Any] | None]
] = {"triton": triton_descriptors}

_said: set[str] = set()


def _once(message: str, *args: Any) -> None:
    """Log ``message`` at warning level once per worker process."""
    text = message % args
    if text not in _said:
        _said.add(text)
        log.warning(text)


def task_device() -> str:
    """``"cuda"`` on a GPU worker whose CUDA device torch sees, else ``"cpu"``."""
    from dparallel.cluster.gpus import worker_gpus

    if worker_gpus() <= 0:
        return "cpu"
    try:
        import torch

        available = bool(torch.cuda.is_available())
    except ImportError:
        available = False
    if not available:
        _once(
            "GPU worker (Dask resource GPU) without a usable CUDA device "
            "(CUDA_VISIBLE_DEVICES=%r): featurizing on the CPU",
            os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
        return "cpu"
    return "cuda"


def device_descriptors(
    batch: StructureBatch, dset: DescriptorSet, neighbors: Neighbors, device: str
) -> dict[str, Any] | None:
    """The store arrays of ``dset`` computed on ``device`` by the first engine of
    :data:`DEVICE_ENGINES` that takes the set; ``None`` (logged once): compute on the CPU."""
    for engine in DEVICE_ENGINES.values():
        found = engine(batch, dset, neighbors, device)
        if found is not None:
            return found
    _once(
        "no featurize engine for %s on %r registered (dparallel.workflow.featurize_device."
        "DEVICE_ENGINES): computing on the CPU",
        ", ".join(dset.by_name),
        device,
    )
    return None
