"""n2p2 cutoff functions f_c(r) and their derivatives, as pure torch functions.

With inner cutoff r_ci = α·r_c and x = (r − r_ci)/(r_c − r_ci): f_c = 1 for r < r_ci, f(x)
for r_ci ≤ r < r_c, 0 for r ≥ r_c; the tanh types (2, 3) ignore α and use r/r_c, as n2p2
does. The nine f of :data:`CUTOFF_TYPES`: docs/acsf.md, "Formulas".
"""

from __future__ import annotations

import math

import torch

from dparallel.errors import DescriptorError
from dparallel.kernels.cutoff_types import CUTOFF_TYPES, cutoff_type_id

__all__ = ["CUTOFF_TYPES", "cutoff_fn", "cutoff_fn_and_derivative", "cutoff_type_id"]

_TANH_NORM = 1.0 / math.tanh(1.0) ** 3


def _core(x: torch.Tensor, kind: int) -> tuple[torch.Tensor, torch.Tensor]:
    """f(x) and df/dx on the switching region (x in [0, 1))."""
    if kind == 0:
        return torch.ones_like(x), torch.zeros_like(x)
    if kind == 1:
        px = math.pi * x
        return 0.5 * (torch.cos(px) + 1.0), -0.5 * math.pi * torch.sin(px)
    if kind == 4:
        one_m = (1.0 - x * x).clamp_min(1e-300)
        f = torch.exp(1.0 - 1.0 / one_m)
        return f, -2.0 * x * f / (one_m * one_m)
    if kind == 5:
        return (2.0 * x - 3.0) * x * x + 1.0, (6.0 * x - 6.0) * x
    if kind == 6:
        x2 = x * x
        return ((15.0 - 6.0 * x) * x - 10.0) * x2 * x + 1.0, x2 * ((60.0 - 30.0 * x) * x - 30.0)
    if kind == 7:
        x3 = x * x * x
        f = (x * (x * (20.0 * x - 70.0) + 84.0) - 35.0) * x3 * x + 1.0
        return f, x3 * (x * (x * (140.0 * x - 420.0) + 420.0) - 140.0)
    if kind == 8:
        x4 = x * x * x * x
        f = (x * (x * ((315.0 - 70.0 * x) * x - 540.0) + 420.0) - 126.0) * x4 * x + 1.0
        return f, x4 * (x * (x * ((2520.0 - 630.0 * x) * x - 3780.0) + 2520.0) - 630.0)
    raise DescriptorError(f"cutoff type {kind} has no x-form")  # pragma: no cover


def cutoff_fn_and_derivative(
    r: torch.Tensor, rc: float, kind: int, alpha: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """f_c(r) and df_c/dr (same shape as ``r``), zero for r ≥ rc; differentiable."""
    inside = r < rc
    if kind in (2, 3):
        t = torch.tanh(1.0 - r / rc)
        t2 = t * t
        f = t2 * t
        df = -3.0 * t2 * (1.0 - t2) / rc
        if kind == 3:
            f, df = f * _TANH_NORM, df * _TANH_NORM
    else:
        rci = alpha * rc
        width = rc - rci
        x = ((r - rci) / width).clamp(0.0, 1.0)
        f, dfdx = _core(x, kind)
        df = dfdx / width
        if alpha > 0.0 and kind != 0:
            below = r < rci
            f = torch.where(below, torch.ones_like(f), f)
            df = torch.where(below, torch.zeros_like(df), df)
    zero = torch.zeros_like(f)
    return torch.where(inside, f, zero), torch.where(inside, df, zero)


def cutoff_fn(r: torch.Tensor, rc: float, kind: int, alpha: float = 0.0) -> torch.Tensor:
    """f_c(r) (same shape as ``r``), zero for r ≥ rc."""
    return cutoff_fn_and_derivative(r, rc, kind, alpha)[0]
