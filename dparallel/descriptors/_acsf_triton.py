"""The Triton ACSF backend behind :meth:`dparallel.descriptors.ACSF.compute` (``backend="triton"``).

Wraps :func:`dparallel.kernels._backends.triton_acsf.triton_acsf_element` with the engine's
conventions: :func:`triton_element` returns what
:func:`~dparallel.descriptors._acsf_engine.numba_element` returns (values and, per
neighbour element, the pair selector and dG/dr pair-major or split as the store keeps it),
as torch tensors; :func:`evaluate_triton` is the route ``ACSF.compute`` takes. The torch
backend is the reference this backend is tested against (tests/kernels/test_triton_acsf.py).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.errors import BackendUnavailableError
from dparallel.kernels._backends.triton_env import interpreting

if TYPE_CHECKING:
    import torch

    from dparallel.descriptors._acsf_engine import ElementPlan

__all__ = ["check_triton", "evaluate_triton", "triton_device", "triton_element"]


def check_triton() -> None:
    """Raise :class:`BackendUnavailableError` unless the Triton backend can run here.

    It needs the ``triton`` package and either a CUDA device or the Triton CPU
    interpreter (``TRITON_INTERPRET=1`` in the environment before triton is imported).
    """
    if importlib.util.find_spec("triton") is None:
        raise BackendUnavailableError("backend='triton' needs triton (pip install triton)")
    import torch

    if not torch.cuda.is_available() and not interpreting():
        raise BackendUnavailableError(
            "backend='triton' needs a CUDA device, or TRITON_INTERPRET=1 (set before triton "
            "is imported) to run the kernel on CPU in Triton's interpreter"
        )


def triton_device() -> torch.device:
    """Where the kernel runs: the CPU under the interpreter, else the current CUDA device."""
    import torch

    return torch.device("cpu") if interpreting() else torch.device("cuda")


def triton_element(
    plan: ElementPlan,
    vectors: torch.Tensor,
    distances: torch.Tensor,
    center: torch.Tensor,
    neighbor_el: torch.Tensor,
    n_centers: int,
    n_el: int,
    derivatives: bool,
    dtype: torch.dtype | None = None,
    derivative_dtype: torch.dtype | None = None,
    split: bool = False,
) -> tuple[torch.Tensor, dict[int, tuple[torch.Tensor, Any]] | None]:
    """:func:`~dparallel.descriptors._acsf_engine.numba_element` on the Triton kernel.

    Tensors on the kernel's device (:func:`triton_device`); outputs in ``dtype`` (default
    the vectors' dtype; computed in float64), dG/dr in ``derivative_dtype``. Returns values
    (n_centers, F) and, with ``derivatives``, ``{f: (sel (P_f,), dG/dr)}`` where dG/dr is
    (P_f, F_f, 3) or, with ``split``, a
    :class:`~dparallel.descriptors._acsf_engine.SplitDerivatives` of tensors.
    """
    from dparallel.descriptors._acsf_engine import derivative_groups
    from dparallel.kernels._backends.triton_acsf import triton_acsf_element

    check_triton()
    kplan = plan.kernel
    assert kplan is not None
    out = triton_acsf_element(
        kplan, vectors, distances, center, neighbor_el, n_centers, n_el, derivatives,
        dtype or vectors.dtype, derivative_dtype,
    )  # fmt: skip
    if not derivatives:
        return out.values, None
    assert out.dflat is not None

    def pair_major(sel: torch.Tensor, block: torch.Tensor, radial: np.ndarray) -> torch.Tensor:
        unit = vectors.index_select(0, sel) / distances.index_select(0, sel)[:, None]
        return _pair_major(block, radial, unit.to(block.dtype))

    groups = derivative_groups(
        kplan, out.selections, out.d_base, out.n_rows, out.dflat, split, pair_major
    )
    return out.values, groups


def _pair_major(block: torch.Tensor, radial: np.ndarray, unit: torch.Tensor) -> torch.Tensor:
    """(P, F, 3) dG/dr in feature order from a split block (F_r + 3 F_a, P)."""
    import torch

    n_rad = int(radial.sum())
    n_p = block.shape[1]
    rad = block[:n_rad].T.unsqueeze(2) * unit.unsqueeze(1)  # (P, F_r, 3): s · r̂
    ang = block[n_rad:].T.reshape(n_p, radial.shape[0] - n_rad, 3)  # (P, F_a, 3)
    both = torch.cat([rad, ang], 1)
    where = np.where(radial, np.cumsum(radial) - 1, n_rad + np.cumsum(~radial) - 1)
    return both.index_select(1, torch.as_tensor(where, device=block.device))


def evaluate_triton(
    plan: ElementPlan,
    vectors: torch.Tensor,
    distances: torch.Tensor,
    center: torch.Tensor,
    neighbor_el: torch.Tensor,
    n_centers: int,
    n_el: int,
    derivatives: bool,
) -> tuple[torch.Tensor, dict[int, tuple[torch.Tensor, torch.Tensor]] | None]:
    """:func:`~dparallel.descriptors._acsf_engine.evaluate_element` on the Triton kernel;
    results on the inputs' device."""
    home = vectors.device
    dev = triton_device()
    values, groups = triton_element(
        plan, vectors.detach().to(dev), distances.detach().to(dev), center.to(dev),
        neighbor_el.to(dev), n_centers, n_el, derivatives,
    )  # fmt: skip
    if groups is None:
        return values.to(home), None
    return values.to(home), {f: (s.to(home), d.to(home)) for f, (s, d) in groups.items()}
