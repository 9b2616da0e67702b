"""train/splits.py: each structure's split."""

from __future__ import annotations

import numpy as np

from dparallel.train.splits import assign_splits


def test_assign_splits_fractions_tags_and_determinism() -> None:
    ids = np.arange(20_000)
    tags = np.full(ids.shape, "", dtype=object)
    s = assign_splits(ids, tags, 0.1, 0.2, seed=5)
    assert abs((s == 1).mean() - 0.1) < 0.01 and abs((s == 2).mean() - 0.2) < 0.01
    assert np.array_equal(s, assign_splits(ids, tags, 0.1, 0.2, seed=5))
    assert not np.array_equal(s, assign_splits(ids, tags, 0.1, 0.2, seed=6))
    # a structure's split does not depend on which other structures are split with it
    assert np.array_equal(s[5000:6000], assign_splits(ids[5000:6000], tags[:1000], 0.1, 0.2, 5))
    tags[:100] = "test"
    tags[100:200] = "train"
    t = assign_splits(ids, tags, 0.1, 0.2, seed=5)
    assert np.all(t[:100] == 2) and np.all(t[100:200] != 2)
