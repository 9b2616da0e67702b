"""The pairs grouped by atom, as the segment-reduced backends (numba, Triton) visit them."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["segments"]


def segments(key: Tensor, n_atoms: int) -> tuple[Tensor, Tensor]:
    """Stable sort order (P,) of ``key`` (each pair's atom) and CSR-style start offsets
    (N + 1,) per atom, both int64 on ``key``'s device."""
    order = torch.argsort(key, stable=True)
    starts = torch.zeros(n_atoms + 1, dtype=torch.int64, device=key.device)
    torch.cumsum(torch.bincount(key, minlength=n_atoms), 0, out=starts[1:])
    return order, starts
