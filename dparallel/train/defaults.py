"""Default descriptor sets that reach the accuracy targets in docs/training.md."""

from __future__ import annotations

import numpy as np

from dparallel.descriptors import ACSF

__all__ = ["cu_acsf"]


def cu_acsf(r_cut: float = 5.0) -> ACSF:
    """ACSF for elemental Cu: 8 radial (type 2) + 4 angular (type 3) functions, cosine cutoff.

    Radial: one wide Gaussian (η = 0.01 Å⁻², rs = 0) and 7 shifted Gaussians with rs
    evenly from 2.0 Å to r_cut − 0.6 Å and η = 1/(2 Δrs²), so neighbouring ones overlap.
    Angular: η = 0.01 Å⁻², rs = 0, ζ ∈ {1, 4}, λ = ±1. EMT Cu's own cutoff lies between
    the third and fourth fcc shells (~4.8 Å), so r_cut = 5 Å sees everything it sees.
    """
    shifts = np.linspace(2.0, r_cut - 0.6, 7)
    d = float(shifts[1] - shifts[0])
    radial = [(0.01, 0.0)] + [(1.0 / (2 * d * d), float(rs)) for rs in shifts]
    narrow = [(0.01, z, lam, 0.0) for z in (1.0, 4.0) for lam in (-1.0, 1.0)]
    return ACSF.uniform(["Cu"], r_cut=r_cut, cutoff="cos", radial=radial, narrow=narrow)
