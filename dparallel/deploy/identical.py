"""Exact equality of two arrays at the cost of a byte comparison (MD change checks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


def identical(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` have the same shape, dtype and bytes.

    Stricter than ``np.array_equal`` (-0.0 differs from 0.0, a NaN equals the same NaN),
    which is what a cache of a deterministic function needs, and cheaper than it for an MD
    cell's positions (docs/deploy.md): several such checks run per MD step.
    """
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
