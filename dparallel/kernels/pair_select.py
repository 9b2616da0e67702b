"""The pairs of one central element inside its cutoff, gathered in one compiled counting
pass and one filling pass instead of numpy's mask, index and five gathers over the whole
list (measured: docs/kernels.md). When numba does not import, numpy's mask and gathers
(:func:`_element_pairs_numpy`, the reference the tests compare with) give the same pairs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from dparallel.kernels._backends.availability import numba_available

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


_JIT: dict[str, Any] = {}


def _compiled() -> dict[str, Any]:
    """``_count`` and ``_fill`` compiled by numba (on first use: numba may not import)."""
    if not _JIT:
        from dparallel.kernels._numba_jit import jit

        _JIT["count"] = jit(set(), nogil=True)(_count)
        _JIT["fill"] = jit(set(), nogil=True)(_fill)
    return _JIT


def _element_pairs_numpy(
    el_index: np.ndarray,
    local: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    vectors: np.ndarray,
    distances: np.ndarray,
    e: int,
    r_max: float,
) -> ElementPairs:
    """:func:`element_pairs` by numpy's mask and gathers (no numba)."""
    rows = np.flatnonzero((el_index[first] == e) & (distances < r_max)).astype(np.int64)
    return ElementPairs(
        rows,
        local[first[rows]].astype(np.int64),
        el_index[second[rows]].astype(np.int64),
        vectors[rows],
        distances[rows],
    )


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
    if not numba_available():
        return _element_pairs_numpy(el_index, local, first, second, vectors, distances, e, r_max)
    jitted = _compiled()
    n = int(jitted["count"](el_index, first, distances, e, r_max))
    out = ElementPairs(
        np.empty(n, np.int64),
        np.empty(n, np.int64),
        np.empty(n, np.int64),
        np.empty((n, 3), vectors.dtype),
        np.empty(n, distances.dtype),
    )
    jitted["fill"](el_index, local, first, second, vectors, distances, e, r_max, *out)
    return out
