"""The GPU featurize engine: ACSF on the Triton kernel, in the store's layout.

:func:`triton_descriptors` is registered in
:data:`~dparallel.workflow.featurize_device.DEVICE_ENGINES`: on a GPU worker it computes
an ACSF-only descriptor set on the worker's device and returns what
:func:`~dparallel.workflow.featurize_task.task_descriptors` returns on the CPU (the same
keys, dtypes, shapes and pair order; dG/dr split and in the store's precision). It
declines (``None``: the task computes on the CPU) a set with another descriptor type
(neighbour sums), a set whose CPU route is not the compiled kernel (no numba), and a
device the kernel cannot run on (no triton, no CUDA device); a partition too large for the
device's memory is computed on the CPU (logged). Imports torch and triton only when it
computes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dparallel.errors import BackendUnavailableError
from dparallel.store._derivatives import DERIVATIVE_DTYPE

if TYPE_CHECKING:
    import numpy as np

    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.neighbors import Neighbors
    from dparallel.types import StructureBatch

__all__ = ["triton_descriptors"]

log = logging.getLogger(__name__)


def _takes(dset: DescriptorSet) -> bool:
    """Whether the set is ACSF alone, computed on the CPU by the compiled kernel (the
    split, store-precision layout this engine reproduces)."""
    from dparallel.descriptors.acsf import ACSF

    (descriptor, *others) = dset.by_name.values()
    return not others and isinstance(descriptor, ACSF) and not dset.uses_torch


def triton_descriptors(
    batch: StructureBatch, dset: DescriptorSet, neighbors: Neighbors, device: str
) -> dict[str, dict[str, dict[str, np.ndarray]]] | None:
    """``task_descriptors(batch, dset, neighbors)``'s arrays computed by the Triton ACSF
    kernel on ``device``; ``None`` for a set or a device it cannot take."""
    from dparallel.descriptors.acsf_triton_arrays import triton_arrays, triton_runs_on

    if not _takes(dset) or not triton_runs_on(device):
        return None
    import torch

    ((name, acsf),) = dset.by_name.items()
    try:
        arrays = triton_arrays(
            acsf,
            batch,
            neighbors,
            device,
            derivatives=dset.derivatives,
            dtype=dset.dtype,
            derivative_dtype=str(DERIVATIVE_DTYPE),
            split_derivatives=True,
        )
    except (BackendUnavailableError, torch.cuda.OutOfMemoryError) as exc:
        log.warning("Triton ACSF on %r: %s: featurizing this partition on the CPU", device, exc)
        return None
    return {name: {element: _store_keys(a) for element, a in arrays.items()}}


def _store_keys(arrays: dict[str, Any]) -> dict[str, Any]:
    """Derivative blocks under ``d/<F>/``, as :meth:`DescriptorSet.compute` stores them."""
    return {(key if "/" not in key else f"d/{key}"): value for key, value in arrays.items()}
