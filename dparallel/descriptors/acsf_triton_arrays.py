""":meth:`ACSF.compute_arrays <dparallel.descriptors.ACSF.compute_arrays>` on the Triton kernel.

:func:`triton_arrays` returns the same numpy arrays (keys, dtypes, shapes, pair order)
as ``compute_arrays``: the pairs of each central element are selected on the host as
there, the kernel (:func:`~dparallel.descriptors._acsf_triton.triton_element`) runs on a
device and its values and dG/dr (pair-major or split as the store keeps it) come back as
numpy. Both kernels compute in float64 and round once to the output dtypes, so values
agree to float64 rounding and float32 dG/dr to one unit in the last place. What a GPU
featurize worker computes with (:mod:`dparallel.workflow.featurize_triton`).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.errors import DescriptorError
from dparallel.kernels._backends.triton_env import interpreting

if TYPE_CHECKING:
    from collections.abc import Callable

    from dparallel.descriptors._acsf_engine import ElementPlan
    from dparallel.descriptors.acsf import ACSF
    from dparallel.neighbors import Neighbors
    from dparallel.types import StructureBatch

__all__ = ["triton_arrays", "triton_runs_on"]


def triton_runs_on(device: str) -> bool:
    """Whether the Triton kernel can run on ``device`` here: triton installed and a CUDA
    ``device`` torch sees, or ``"cpu"`` under Triton's interpreter (``TRITON_INTERPRET=1``)."""
    if importlib.util.find_spec("triton") is None:
        return False
    import torch

    kind = torch.device(device).type
    if interpreting():
        return kind == "cpu"
    return kind == "cuda" and bool(torch.cuda.is_available())


def _on_device(device: str) -> Callable[..., tuple[np.ndarray, dict[int, tuple[Any, Any]] | None]]:
    """``numba_element`` (its signature, numpy in and out) through the Triton kernel on
    ``device``."""
    import torch

    from dparallel.descriptors._acsf_engine import SplitDerivatives
    from dparallel.descriptors._acsf_triton import triton_element

    dev = torch.device(device)
    torch_dtype = {np.dtype(np.float64): torch.float64, np.dtype(np.float32): torch.float32}

    def element(
        plan: ElementPlan,
        vectors: np.ndarray,
        distances: np.ndarray,
        center: np.ndarray,
        neighbor_el: np.ndarray,
        n_centers: int,
        n_el: int,
        derivatives: bool,
        dtype: type = np.float64,
        float32_terms: bool = False,
        derivative_dtype: type | None = None,
        split: bool = False,
    ) -> tuple[np.ndarray, dict[int, tuple[np.ndarray, Any]] | None]:
        if float32_terms:
            raise DescriptorError("the Triton kernel computes its terms in float64 only")
        vec, dist, cen, nbr = (
            torch.from_numpy(np.ascontiguousarray(a)).to(dev)
            for a in (vectors, distances, center, neighbor_el)
        )
        values, groups = triton_element(
            plan, vec, dist, cen, nbr, n_centers, n_el, derivatives,
            torch_dtype[np.dtype(dtype)], torch_dtype[np.dtype(derivative_dtype or dtype)],
            split=split,
        )  # fmt: skip
        if groups is None:
            return values.cpu().numpy(), None
        out: dict[int, tuple[np.ndarray, Any]] = {}
        for f, (sel, dg) in groups.items():
            if split:
                block = SplitDerivatives(np.asarray(dg.radial), dg.dG_dr_split.cpu().numpy())
                out[f] = (sel.cpu().numpy(), block)
            else:
                out[f] = (sel.cpu().numpy(), dg.cpu().numpy())
        return values.cpu().numpy(), out

    return element


def triton_arrays(
    acsf: ACSF,
    batch: StructureBatch,
    neighbors: Neighbors,
    device: str,
    derivatives: bool = False,
    dtype: str = "float64",
    derivative_dtype: str | None = None,
    split_derivatives: bool = False,
) -> dict[str, dict[str, np.ndarray]]:
    """``acsf.compute_arrays(batch, derivatives, neighbors, dtype, derivative_dtype=,
    split_derivatives=)`` with the Triton kernel on ``device`` (see :func:`triton_runs_on`).

    Raises :class:`~dparallel.errors.BackendUnavailableError` when the kernel cannot run.
    """
    from dparallel.descriptors._acsf_triton import check_triton

    check_triton()
    return acsf._element_arrays(
        batch, neighbors, derivatives, dtype, False, derivative_dtype, split_derivatives,
        element=_on_device(device),
    )  # fmt: skip
