"""Pair vectors and distances of a kept pair list from current positions (MD, Verlet list).

r_ij = r_j − r_i + S·cell and |r_ij| for every kept pair in one compiled pass (numpy
fallback without numba): the per-step part of a reused neighbour list, where numpy's
temporaries of (P, 3) arrays cost more than the arithmetic.
"""

from __future__ import annotations

import numpy as np

from dparallel.kernels._optional_jit import njit_or_none

__all__ = ["pair_vectors"]


def _pair_vectors(pos, first, second, shift_vectors, vectors, distances):  # noqa: ANN001, ANN202
    for p in range(first.shape[0]):
        i = first[p]
        j = second[p]
        x = pos[j, 0] - pos[i, 0] + shift_vectors[p, 0]
        y = pos[j, 1] - pos[i, 1] + shift_vectors[p, 1]
        z = pos[j, 2] - pos[i, 2] + shift_vectors[p, 2]
        vectors[p, 0] = x
        vectors[p, 1] = y
        vectors[p, 2] = z
        distances[p] = np.sqrt(x * x + y * y + z * z)


_jit = njit_or_none(_pair_vectors)


def pair_vectors(
    positions: np.ndarray, first: np.ndarray, second: np.ndarray, shift_vectors: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Vectors (P, 3) and distances (P,) in Å of the pairs (first, second) (int64 (P,)) of
    ``positions`` (N, 3) Å, with ``shift_vectors`` (P, 3) Å = S·cell added."""
    if _jit is None:  # pragma: no cover
        vectors = positions[second] - positions[first] + shift_vectors
        return vectors, np.sqrt(np.einsum("pa,pa->p", vectors, vectors))
    vectors = np.empty((first.shape[0], 3))
    distances = np.empty(first.shape[0])
    _jit(np.ascontiguousarray(positions, dtype=np.float64), first, second, shift_vectors,
         vectors, distances)  # fmt: skip
    return vectors, distances
