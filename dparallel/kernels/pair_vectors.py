"""Pair vectors and distances of a kept pair list from current positions (MD, Verlet list).

r_ij = r_j − r_i + S·cell and |r_ij| for every kept pair in one compiled pass: the
per-step part of a reused neighbour list, where numpy's (P, 3) temporaries cost more than
the arithmetic. The same pass first checks that no atom moved more than a given distance
since the list was built (else the list must be rebuilt and no vectors are computed).
"""

from __future__ import annotations

import numpy as np

from dparallel.kernels._numba_jit import jit

__all__ = ["pair_vectors"]


def _pair_vectors(pos, reference, limit2, first, second, shift_vectors, vectors, distances):  # noqa: ANN001, ANN202
    for a in range(pos.shape[0]):  # no atom moved more than √limit2 since the build
        dx = pos[a, 0] - reference[a, 0]
        dy = pos[a, 1] - reference[a, 1]
        dz = pos[a, 2] - reference[a, 2]
        if dx * dx + dy * dy + dz * dz > limit2:
            return False
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
    return True


_pair_vectors = jit(set(), nogil=True)(_pair_vectors)


def pair_vectors(
    positions: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    shift_vectors: np.ndarray,
    reference: np.ndarray | None = None,
    max_move: float = np.inf,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Vectors (P, 3) and distances (P,) in Å of the pairs (first, second) (int64 (P,)) of
    ``positions`` (N, 3) Å, with ``shift_vectors`` (P, 3) Å = S·cell added; ``None`` if an
    atom moved more than ``max_move`` Å from ``reference`` (N, 3) Å (the build's positions).
    """
    positions = np.ascontiguousarray(positions, dtype=np.float64)
    ref = positions if reference is None else reference
    vectors = np.empty((first.shape[0], 3))
    distances = np.empty(first.shape[0])
    if not _pair_vectors(
        positions, ref, max_move**2, first, second, shift_vectors, vectors, distances
    ):
        return None
    return vectors, distances
