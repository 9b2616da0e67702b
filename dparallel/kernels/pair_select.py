"""The pairs of one central element, gathered in one compiled pass (numpy fallback).

A featurize task's neighbour list holds every pair of the partition (~600k for 6,500 water
atoms); the ACSF kernel runs per central element on that element's pairs inside its
cutoff. Selecting them with numpy costs a mask, an index and five gathers, each a pass over
(P,) or (P, 3) arrays (measured: docs/kernels.md); here it is one counting pass and one
filling pass.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from dparallel.kernels._optional_jit import njit_or_none

__all__ = ["ElementPairs", "element_pairs"]


class ElementPairs(NamedTuple):
    """Pairs whose centre has one element and whose distance is below the cutoff
    (numpy arrays; the ACSF element kernels also take them as torch tensors)."""

    rows: Any  # (P_e,) int64 rows into the whole list, ascending
    center: Any  # (P_e,) int64 row of the centre among the element's atoms
    neighbor_el: Any  # (P_e,) int64 element index of the neighbour
    vectors: Any  # (P_e, 3) r_ij (Å), as the list's dtype
    distances: Any  # (P_e,) |r_ij| (Å)


def _count(el_index, first, distances, e, r_max):  # noqa: ANN001, ANN202
    n = 0
    for p in range(first.shape[0]):
        n += (el_index[first[p]] == e) & (distances[p] < r_max)
    return n


def _fill(el_index, local, first, second, vectors, distances, e, r_max, rows, center, nbr_el,
          vec, dist):  # fmt: skip  # noqa: ANN001, ANN202
    q = 0
    for p in range(first.shape[0]):
        i = first[p]
        if el_index[i] != e or not distances[p] < r_max:
            continue
        rows[q] = p
        center[q] = local[i]
        nbr_el[q] = el_index[second[p]]
        vec[q, 0] = vectors[p, 0]
        vec[q, 1] = vectors[p, 1]
        vec[q, 2] = vectors[p, 2]
        dist[q] = distances[p]
        q += 1


_count_jit = njit_or_none(_count)
_fill_jit = njit_or_none(_fill)


def element_pairs(
    el_index: np.ndarray,
    local: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    vectors: np.ndarray,
    distances: np.ndarray,
    e: int,
    r_max: float,
) -> ElementPairs:
    """The pairs (first (P,), second (P,) int64 atom rows; vectors (P, 3), distances (P,))
    centred on atoms of element index ``e`` (``el_index`` (N,)) with distance < ``r_max``,
    in list order; ``local`` (N,) int64 is each atom's row among the atoms of its element."""
    if _count_jit is None:  # pragma: no cover - numba is a runtime dependency
        rows = np.flatnonzero((el_index[first] == e) & (distances < r_max))
        return ElementPairs(
            rows, local[first[rows]], el_index[second[rows]], vectors[rows], distances[rows]
        )
    n = int(_count_jit(el_index, first, distances, e, r_max))
    out = ElementPairs(
        np.empty(n, np.int64),
        np.empty(n, np.int64),
        np.empty(n, np.int64),
        np.empty((n, 3), vectors.dtype),
        np.empty(n, distances.dtype),
    )
    _fill_jit(el_index, local, first, second, vectors, distances, e, r_max, *out)
    return out
