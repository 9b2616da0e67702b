"""Host-side tables of the Triton ACSF kernel that need no Triton (plain torch ops)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dparallel.kernels._backends.triton_acsf_tables import rank_within_value


@pytest.mark.parametrize(("n", "n_values", "seed"), [(1, 1, 0), (50, 2, 1), (997, 5, 2)])
def test_rank_within_value_counts_earlier_entries_of_the_same_value(
    n: int, n_values: int, seed: int
) -> None:
    """Rank i = how many earlier entries hold the same value (by a direct count)."""
    values = np.random.default_rng(seed).integers(0, n_values, n)
    expected = np.array([np.count_nonzero(values[:i] == v) for i, v in enumerate(values)])
    got = rank_within_value(torch.from_numpy(values), n_values)
    np.testing.assert_array_equal(got.numpy(), expected)


def test_rank_within_value_of_an_absent_value_and_a_sorted_input() -> None:
    """Values that do not occur, and runs of one value, rank 0, 1, 2, … per value."""
    values = torch.tensor([3, 3, 3, 0, 0, 3], dtype=torch.int64)
    got = rank_within_value(values, 5)
    assert got.tolist() == [0, 1, 2, 0, 1, 3]
