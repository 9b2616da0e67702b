"""The checks every reader applies, at the scale of a partition of small structures."""

from __future__ import annotations

import numpy as np

from dparallel.io import _validate
from dparallel.types import StructureBatch


def _one_atom_each(cells: np.ndarray, pbc: np.ndarray) -> StructureBatch:
    """A batch of single-atom H structures (atom at the origin) with these cells and pbc."""
    n = cells.shape[0]
    return StructureBatch(
        numbers=np.ones(n, np.int64),
        positions=np.zeros((n, 3)),
        forces=np.zeros((n, 3)),
        cells=cells,
        pbc=pbc,
        energy=np.zeros(n),
        offsets=np.arange(n + 1),
    )


def test_singular_cells_are_found_with_a_batched_svd_per_pbc_pattern(rng, monkeypatch):
    # the check ran one SVD per periodic structure (~20 us each: a fifth of reading a
    # small periodic frame); now one per pbc pattern, with the same findings
    n = 2_000
    cells = rng.uniform(4.0, 9.0, (n, 3, 3)) + 10 * np.eye(3)  # regular
    pbc = rng.random((n, 3)) < 0.7
    pbc[:50] = False  # molecules: no cell needed
    flat = rng.choice(np.arange(50, n), 300, replace=False)  # two equal vectors
    cells[flat, 1] = cells[flat, 0]
    cells[flat[:100]] = 0.0  # no Lattice at all
    calls = []
    real = np.linalg.svd
    monkeypatch.setattr(np.linalg, "svd", lambda *a, **k: calls.append(1) or real(*a, **k))
    found = _validate.validate_batch(_one_atom_each(cells, pbc))
    svds = len(calls)
    # the reference: numpy's rank of each structure's periodic vectors, one by one
    expected = {
        s
        for s in range(n)
        if pbc[s].any() and np.linalg.matrix_rank(cells[s][pbc[s]]) < pbc[s].sum()
    }
    assert set(found) == expected and len(expected) > 100
    zero = {s for s in expected if not cells[s].any()}
    assert all("has no cell" in found[s] for s in zero)
    assert all("singular cell" in found[s] for s in expected - zero)
    assert svds <= 7  # one per periodic pbc pattern, not one per structure
