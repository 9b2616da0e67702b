"""All-pairs neighbour lists of many small structures in one compiled call.

For structures of tens to hundreds of atoms a cell list does more bookkeeping than work:
here every atom is tested against every atom of each periodic image that can reach it
(positions wrapped into the cell, far image slabs skipped, each kept vector recomputed as
``r_j − r_i + S·cell``), giving vesin's and ASE's pairs in batch order, sorted by
``pair_first`` without a sort (docs/acsf.md, "Neighbour list").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["SMALL_CELL_ATOMS", "small_cell_pairs"]

#: Structures with at most this many atoms take this path (larger ones: vesin's cell
#: lists): where ``benchmarks/bench_neighbors.py`` found this path no longer ahead of
#: vesin (all pairs grow as N², cell lists as N; the figures: docs/kernels.md).
SMALL_CELL_ATOMS = 1500

# pairs tested within this relative margin of rc on the wrapped coordinates are decided
# on the vector recomputed from the original positions
_MARGIN = 1e-9


def _pairs(  # noqa: ANN202 - compiled
    positions, offsets, cells, inverses, images, structures, rc,
    first, second, shifts, vectors, distances,
):  # fmt: skip
    """Fill the output arrays with every pair of the given structures; returns the number
    of pairs (also when the arrays are too short: then only the first ones are written)."""
    count = 0
    capacity = first.shape[0]
    rc2 = rc * rc
    loose2 = rc2 * (1.0 + _MARGIN) ** 2
    for t in range(structures.shape[0]):
        s = structures[t]
        a = offsets[s]
        n = offsets[s + 1] - a
        if n == 0:
            continue
        h = cells[s]
        g = inverses[s]
        na = images[s]
        spacing = np.zeros(3)
        for c in range(3):
            if na[c] > 0:
                spacing[c] = 1.0 / math.sqrt(g[0, c] ** 2 + g[1, c] ** 2 + g[2, c] ** 2)
        frac = np.zeros((n, 3))  # wrapped fractional coordinates (periodic axes)
        wrap = np.zeros((n, 3), np.int64)  # cells the atom was moved back by
        wrapped = np.empty((n, 3))
        for i in range(n):
            p = positions[a + i]
            for c in range(3):
                if na[c] > 0:
                    f = p[0] * g[0, c] + p[1] * g[1, c] + p[2] * g[2, c]
                    k = math.floor(f)
                    wrap[i, c] = k
                    frac[i, c] = f - k
            for c in range(3):
                wrapped[i, c] = (
                    p[c] - wrap[i, 0] * h[0, c] - wrap[i, 1] * h[1, c] - wrap[i, 2] * h[2, c]
                )
        for i in range(n):
            for s0 in range(-na[0], na[0] + 1):
                if _far(s0, frac[i, 0], spacing[0], rc):
                    continue
                for s1 in range(-na[1], na[1] + 1):
                    if _far(s1, frac[i, 1], spacing[1], rc):
                        continue
                    for s2 in range(-na[2], na[2] + 1):
                        if _far(s2, frac[i, 2], spacing[2], rc):
                            continue
                        home = s0 == 0 and s1 == 0 and s2 == 0
                        cx = s0 * h[0, 0] + s1 * h[1, 0] + s2 * h[2, 0] - wrapped[i, 0]
                        cy = s0 * h[0, 1] + s1 * h[1, 1] + s2 * h[2, 1] - wrapped[i, 1]
                        cz = s0 * h[0, 2] + s1 * h[1, 2] + s2 * h[2, 2] - wrapped[i, 2]
                        for j in range(n):
                            dx = wrapped[j, 0] + cx
                            dy = wrapped[j, 1] + cy
                            dz = wrapped[j, 2] + cz
                            if dx * dx + dy * dy + dz * dz >= loose2 or (home and i == j):
                                continue
                            # the shift in the caller's frame, and the vector from it
                            q0 = s0 - wrap[j, 0] + wrap[i, 0]
                            q1 = s1 - wrap[j, 1] + wrap[i, 1]
                            q2 = s2 - wrap[j, 2] + wrap[i, 2]
                            pi = positions[a + i]
                            pj = positions[a + j]
                            vx = pj[0] - pi[0] + q0 * h[0, 0] + q1 * h[1, 0] + q2 * h[2, 0]
                            vy = pj[1] - pi[1] + q0 * h[0, 1] + q1 * h[1, 1] + q2 * h[2, 1]
                            vz = pj[2] - pi[2] + q0 * h[0, 2] + q1 * h[1, 2] + q2 * h[2, 2]
                            r2 = vx * vx + vy * vy + vz * vz
                            if r2 >= rc2:
                                continue
                            d = math.sqrt(r2)
                            if d >= rc:  # r² a rounding below rc², |r| rounded to rc: out
                                continue
                            if count < capacity:
                                first[count] = a + i
                                second[count] = a + j
                                shifts[count, 0] = q0
                                shifts[count, 1] = q1
                                shifts[count, 2] = q2
                                vectors[count, 0] = vx
                                vectors[count, 1] = vy
                                vectors[count, 2] = vz
                                distances[count] = d
                            count += 1
    return count


def _far(shift, f, spacing, rc):  # noqa: ANN001, ANN202 - compiled
    """Whether the image slab ``[shift, shift + 1)`` along an axis lies beyond rc of an atom
    at wrapped fractional coordinate ``f`` (only for periodic axes: spacing > 0)."""
    if shift == 0 or spacing == 0.0:
        return False
    gap = shift - f if shift > 0 else f - shift - 1.0
    return gap * spacing > rc * (1.0 + _MARGIN)


_JIT: dict[str, Any] = {}


def _compiled() -> Any:
    """The numba-compiled (cached on disk) :func:`_pairs`."""
    if "pairs" not in _JIT:
        import numba

        from dparallel.kernels._numba_jit import cache_anywhere

        cache_anywhere()
        jit = numba.njit(cache=True, nogil=True, error_model="numpy")
        far = jit(_far)
        globals()["_far"] = far  # _pairs calls the compiled helper
        _JIT["pairs"] = jit(_pairs)
    return _JIT["pairs"]


def small_cell_pairs(
    positions: np.ndarray,
    offsets: np.ndarray,
    cells: np.ndarray,
    pbc: np.ndarray,
    structures: np.ndarray,
    cutoff: float,
) -> tuple[np.ndarray, ...]:
    """``(i, j, shifts, vectors, distances)`` of the given structures of a batch.

    ``positions`` (N, 3) Å, ``offsets`` (S + 1,), ``cells`` (S, 3, 3) (rows: cell vectors;
    non-singular where ``pbc`` (S, 3) has a periodic axis), ``structures`` (S',) ascending.
    Indices are global rows; pairs sorted by i.
    """
    structures = np.asarray(structures, np.int64)
    cells = np.ascontiguousarray(cells, np.float64)
    sub_cells, sub_pbc = cells[structures], pbc[structures]  # (S', 3, 3), (S', 3)
    periodic = sub_pbc.any(axis=1)
    inverses = np.zeros_like(cells)
    images = np.zeros((cells.shape[0], 3), np.int64)
    counts = (offsets[structures + 1] - offsets[structures]).astype(np.float64)  # (S',)
    estimate = counts * counts  # non-periodic: at most all pairs
    if periodic.any():
        inv = np.linalg.inv(sub_cells[periodic])  # (S'', 3, 3)
        spacing = 1.0 / np.linalg.norm(inv, axis=1)  # (S'', 3) plane spacings
        n_img = np.where(sub_pbc[periodic], np.ceil(cutoff / spacing), 0).astype(np.int64)
        inverses[structures[periodic]] = inv
        images[structures[periodic]] = n_img
        volume = np.abs(np.linalg.det(sub_cells[periodic]))  # (S'',)
        sphere = 4.0 / 3.0 * np.pi * cutoff**3
        n = counts[periodic]
        bound = n * n * np.prod(2 * n_img + 1, axis=1)
        estimate[periodic] = np.minimum(bound, 1.25 * n * n * sphere / volume + 8 * n)
    capacity = int(estimate.sum()) + 16
    pairs = _compiled()
    positions = np.ascontiguousarray(positions, np.float64)
    offsets = np.ascontiguousarray(offsets, np.int64)
    for _ in range(2):  # a second pass only if the estimate was short
        out = (
            np.empty(capacity, np.int64), np.empty(capacity, np.int64),
            np.empty((capacity, 3), np.int64), np.empty((capacity, 3)), np.empty(capacity),
        )  # fmt: skip
        found = pairs(positions, offsets, cells, inverses, images, structures, float(cutoff), *out)
        if found <= capacity:
            return tuple(a[:found] for a in out)
        capacity = found
    raise AssertionError("unreachable: the second pass has room for every pair")
