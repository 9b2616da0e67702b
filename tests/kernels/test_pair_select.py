"""element_pairs: one compiled pass, and the numpy route taken when numba does not import,
against the numpy selection written out here."""

from __future__ import annotations

import numpy as np
import pytest

from dparallel.kernels._backends import availability
from dparallel.kernels.pair_select import element_pairs


@pytest.mark.parametrize("numba", [True, False], ids=["compiled", "numba-broken"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_element_pairs_match_the_numpy_selection(rng, dtype, numba, monkeypatch):
    if not numba:
        monkeypatch.setitem(availability.PROBED, "numba", "ImportError: broken for the test")
    n_atoms, n_pairs = 300, 5000
    el_index = rng.integers(0, 3, n_atoms)
    local = np.zeros(n_atoms, np.int64)
    for e in range(3):
        local[el_index == e] = np.arange(int((el_index == e).sum()))
    first = np.sort(rng.integers(0, n_atoms, n_pairs))
    second = rng.integers(0, n_atoms, n_pairs)
    vectors = rng.normal(size=(n_pairs, 3)).astype(dtype) * 3
    distances = np.linalg.norm(vectors, axis=1).astype(dtype)
    for e in range(4):  # element 3 has no atoms
        got = element_pairs(el_index, local, first, second, vectors, distances, e, 4.0)
        rows = np.flatnonzero((el_index[first] == e) & (distances < 4.0))
        assert 0 < rows.size < n_pairs or e == 3
        assert np.array_equal(got.rows, rows)
        assert np.array_equal(got.center, local[first[rows]])
        assert np.array_equal(got.neighbor_el, el_index[second[rows]])
        assert got.vectors.dtype == dtype and np.array_equal(got.vectors, vectors[rows])
        assert got.distances.dtype == dtype and np.array_equal(got.distances, distances[rows])
