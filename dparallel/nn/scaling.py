"""Descriptor scaling of the atomic networks: dparallel's modes and n2p2's scaling types."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.errors import TrainingError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["SCALING_MODES", "scaling_from_statistics", "scaling_parameters"]

#: Feature scaling modes: dparallel's (constant features get factor 1) and n2p2's types.
SCALING_MODES = (
    "center_sigma",
    "minmax",
    "center",
    "none",
    "scale",
    "scalecenter",
    "scalesigma",
)
_N2P2_MODES = ("scale", "scalecenter", "scalesigma")


def scaling_parameters(
    stats: Mapping[str, Any], mode: str, smin: float = 0.0, smax: float = 1.0
) -> tuple[np.ndarray, np.ndarray, float]:
    """(shift, factor, offset) per feature so that scaled G = (G − shift) · factor + offset.

    ``stats`` holds n2p2 scaling.data fields (min, max, mean, sigma lists). dparallel modes
    (offset 0; constant features — σ or max − min below 1e-12 — get factor 1):
    ``center_sigma`` (G − mean)/σ; ``minmax`` to [−1, 1]; ``center`` G − mean; ``none``.
    n2p2 types (``SymFnc::scale``, offset = Smin, the same floating-point operations):
    ``scale`` Smin + (Smax − Smin)(G − min)/(max − min); ``scalecenter`` the same around
    the mean; ``scalesigma`` Smin + (Smax − Smin)(G − mean)/σ. Where n2p2 would divide by
    zero (a constant feature) the factor is Smax − Smin instead of n2p2's inf.
    """
    lo = np.asarray(stats["min"], np.float64)
    hi = np.asarray(stats["max"], np.float64)
    mean = np.asarray(stats["mean"], np.float64)
    sigma = np.asarray(stats["sigma"], np.float64)
    if mode == "center_sigma":
        return mean, 1.0 / np.where(sigma > 1e-12, sigma, 1.0), 0.0
    if mode == "minmax":
        width = hi - lo
        return 0.5 * (hi + lo), 2.0 / np.where(width > 1e-12, width, 1.0), 0.0
    if mode == "center":
        return mean, np.ones_like(mean), 0.0
    if mode == "none":
        return np.zeros_like(mean), np.ones_like(mean), 0.0
    if mode in _N2P2_MODES:
        denom = sigma if mode == "scalesigma" else hi - lo
        factor = (smax - smin) / np.where(denom != 0.0, denom, 1.0)
        return (lo if mode == "scale" else mean), factor, float(smin)
    raise TrainingError(f"unknown scaling mode {mode!r}; expected one of {SCALING_MODES}")


def scaling_from_statistics(stats: Mapping[str, Any], mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(shift, factor) per feature so that scaled G = (G − shift) · factor (dparallel modes).

    See :func:`scaling_parameters`; the n2p2 types need its offset as well.
    """
    shift, factor, offset = scaling_parameters(stats, mode)
    if offset != 0.0:
        raise TrainingError(f"scaling mode {mode!r} has an offset; use scaling_parameters")
    return shift, factor
