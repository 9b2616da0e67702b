"""Compiled contraction of ∂E/∂G with per-pair ∂G/∂r_ij into forces and virial.

The mathematics of :func:`dparallel.descriptors.forces_from_derivatives` (torch, used in
training) in one pass over the pairs without (P, F) temporaries: for inference (MD,
evaluation), where the torch version's overhead costs more than the sums themselves.
"""

from __future__ import annotations

import numpy as np

from dparallel.kernels._numba_jit import jit

__all__ = ["add_pair_forces"]


def _add_pair_forces(de_dg, center, feature_index, dg_dr, first, second, vectors, structure,
                     grad, virial):  # fmt: skip
    """grad (N, 3) += ∂E/∂r and virial (S, 3, 3) += −Σ r_ij ⊗ s_ij over one pair block."""
    n_f = feature_index.shape[0]
    for p in range(dg_dr.shape[0]):
        row = de_dg[center[p]]
        sx = 0.0
        sy = 0.0
        sz = 0.0
        for q in range(n_f):
            w = row[feature_index[q]]
            sx += w * dg_dr[p, q, 0]
            sy += w * dg_dr[p, q, 1]
            sz += w * dg_dr[p, q, 2]
        i = first[p]
        j = second[p]
        grad[j, 0] += sx
        grad[j, 1] += sy
        grad[j, 2] += sz
        grad[i, 0] -= sx
        grad[i, 1] -= sy
        grad[i, 2] -= sz
        if virial.shape[0]:
            w3 = virial[structure[i]]
            for a in range(3):
                r = vectors[p, a]
                w3[a, 0] -= r * sx
                w3[a, 1] -= r * sy
                w3[a, 2] -= r * sz


_add_pair_forces = jit(set(), nogil=True)(_add_pair_forces)


def add_pair_forces(
    de_dg: np.ndarray,
    center: np.ndarray,
    feature_index: np.ndarray,
    dg_dr: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    vectors: np.ndarray,
    structure: np.ndarray,
    grad: np.ndarray,
    virial: np.ndarray,
) -> None:
    """Add one (centre element, neighbour element) pair block to ``grad`` and ``virial``.

    ``de_dg`` (n_e, F_e) ∂E/∂G of the centre element's atoms; ``center``, ``first``,
    ``second`` (P,) int64: row of i in ``de_dg``, global rows of i and j; ``feature_index``
    (F_ef,) the columns of ``de_dg`` that ``dg_dr`` (P, F_ef, 3) ∂G_i/∂r_ij (1/Å) holds;
    ``vectors`` (P, 3) r_ij (Å); ``structure`` (N,) int64 structure of each atom. In place:
    ``grad`` (N, 3) ∂E/∂r (forces = −grad), ``virial`` (S, 3, 3) eV, or (0, 3, 3) to skip.
    """
    _add_pair_forces(
        np.ascontiguousarray(de_dg, dtype=np.float64),
        center,
        feature_index,
        dg_dr,
        first,
        second,
        vectors,
        structure,
        grad,
        virial,
    )
