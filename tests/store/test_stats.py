import functools
import math
from fractions import Fraction

import numpy as np
import pytest

from dparallel.n2p2.scaling_data import format_scaling_data, scaling_table
from dparallel.store.stats import ExactSum, FeatureStats


def _awkward(rng, n=4000, f=5):
    """Values spanning many magnitudes and signs, where float summation order matters."""
    scale = 10.0 ** rng.integers(-12, 12, size=(n, f))
    return rng.standard_normal((n, f)) * scale


def test_exact_sum_equals_fsum_and_fraction_sum(rng):
    x = _awkward(rng)
    got = ExactSum.of(x).fractions()
    for c in range(x.shape[1]):
        assert float(got[c]) == math.fsum(x[:, c])  # correctly rounded
        assert got[c] == sum(Fraction(v) for v in x[:, c])


def test_merge_is_bitwise_independent_of_partitioning_and_order(rng):
    x = _awkward(rng)
    whole = FeatureStats.of(x)
    reference = (whole.mean, whole.sigma, whole.minimum, whole.maximum)
    for trial in range(5):
        cuts = np.sort(rng.choice(np.arange(1, len(x)), size=trial * 7 + 1, replace=False))
        parts = [FeatureStats.of(p) for p in np.split(x, cuts)]
        rng.shuffle(parts)
        merged = functools.reduce(FeatureStats.merge, parts, FeatureStats.empty(x.shape[1]))
        assert merged.count == len(x)
        for a, b in zip(
            (merged.mean, merged.sigma, merged.minimum, merged.maximum), reference, strict=True
        ):
            np.testing.assert_array_equal(a, b)
    # naive float sums do depend on the order: the exactness is doing real work
    assert any(np.sum(x[::-1, c]) != np.sum(x[:, c]) for c in range(x.shape[1]))


def test_mean_and_sigma_match_numpy(rng):
    x = rng.uniform(0.0, 3.0, size=(500, 4))
    stats = FeatureStats.of(x)
    np.testing.assert_allclose(stats.mean, x.mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(stats.sigma, x.std(axis=0, ddof=1), rtol=1e-12)


def test_empty_and_json_roundtrip(rng):
    x = rng.normal(size=(10, 3))
    empty = FeatureStats.empty(3)
    assert empty.merge(FeatureStats.of(x)).to_json() == FeatureStats.of(x).to_json()
    back = FeatureStats.from_json(FeatureStats.of(x).to_json())
    np.testing.assert_array_equal(back.mean, FeatureStats.of(x).mean)
    assert np.isnan(empty.mean).all()
    np.testing.assert_array_equal(FeatureStats.of(x[:1]).sigma, 0.0)


def test_non_finite_values_are_refused():
    with pytest.raises(ValueError, match="non-finite"):
        ExactSum.of(np.array([[1.0], [np.nan]]))


def test_scaling_data_columns_follow_n2p2(rng):
    a, b = FeatureStats.of(rng.normal(size=(7, 2))), FeatureStats.of(rng.normal(size=(4, 3)))
    text = format_scaling_data([scaling_table(a), scaling_table(b)])
    rows = [line.split() for line in text.splitlines() if not line.startswith("#")]
    assert len(rows) == 5
    assert [r[:2] for r in rows] == [["1", "1"], ["1", "2"], ["2", "1"], ["2", "2"], ["2", "3"]]
    np.testing.assert_allclose(
        [float(v) for v in rows[2][2:]],
        [b.minimum[0], b.maximum[0], b.mean[0], b.sigma[0]],
        rtol=1e-15,
    )


def test_the_summary_is_numpys_min_max_mean_and_sigma() -> None:
    # the record featurize writes and training scales by, against numpy (float64 sums)
    rng = np.random.default_rng(5)
    x = rng.normal(3.0, 0.2, size=(1000, 4)) ** 3
    got = FeatureStats.of(x).summary()
    assert got["count"] == 1000
    np.testing.assert_array_equal(got["min"], x.min(0))
    np.testing.assert_array_equal(got["max"], x.max(0))
    np.testing.assert_allclose(got["mean"], x.mean(0), rtol=1e-14, atol=0)
    np.testing.assert_allclose(got["sigma"], x.std(0, ddof=1), rtol=1e-12, atol=0)


def test_sigma_of_a_constant_feature_is_zero_and_sum_squares_exact(rng) -> None:
    # x·x rounded left n·(fl(x²) − x²) in Σx² − (Σx)²/n: σ ~1e-8·|x| for a feature equal in
    # every row (a molecule's C–C radial function over its rotations), and a scaling factor
    # 1/σ ~1e9 in training (forces of ~1e4 eV/Å, not covariant under rotation)
    x = np.full((7, 4), [0.1, 2.7, 1 / 3, -5.3e-3])
    np.testing.assert_array_equal(FeatureStats.of(x).sigma, 0.0)
    y = _awkward(rng, n=300, f=3)
    y[:, 0] = 1 / 3 + np.arange(300) % 3 * np.spacing(1 / 3)  # values one ulp apart
    stats = FeatureStats.of(y)
    for c, got in enumerate(stats.sum_squares.fractions()):
        assert got == sum(Fraction(v) ** 2 for v in y[:, c])  # exact, against Fractions
    exact = [Fraction(v) for v in y[:, 0]]
    mean = sum(exact) / len(exact)
    var = sum((v - mean) ** 2 for v in exact) / (len(exact) - 1)
    assert stats.sigma[0] == pytest.approx(float(var) ** 0.5, rel=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_out_of_range_finds_exactly_the_values_not_finite_or_beyond_float32(dtype):
    """Against the value-by-value reference, with values whose Σx² overflows although
    every one is in range (the one-pass test's fallback) and the damage training refuses."""
    from dparallel.store.stats import FEATURE_LIMIT, out_of_range

    rng = np.random.default_rng(5)
    values = rng.normal(size=(50, 7)).astype(dtype)
    assert out_of_range(values) is None
    values[3, 1] = 1e30 if dtype == np.float32 else 1e200  # Σx² overflows, yet allowed…
    if dtype == np.float32:
        assert out_of_range(values) is None
    else:  # … but not beyond float32's largest
        assert out_of_range(values).tolist() == (np.abs(values) > FEATURE_LIMIT).tolist()
    values[3, 1] = 1.0
    for bad in (np.nan, np.inf, -np.inf) + ((1e39, -1e300) if dtype == np.float64 else ()):
        damaged = values.copy()
        damaged[7, 2] = bad
        want = ~(np.isfinite(damaged) & (np.abs(damaged) <= float(np.finfo(np.float32).max)))
        assert out_of_range(damaged).tolist() == want.tolist()
        assert out_of_range(damaged.T).tolist() == want.T.tolist()  # a transposed view
    assert out_of_range(np.arange(6)) is None  # integers: nothing to check


def test_statistics_of_a_partition_take_little_memory_beyond_its_values(rng, monkeypatch):
    """The exact sums run in blocks of rows: a task's statistics of 20,000 atoms of 72
    features took 11× the values' bytes at once (tracemalloc), now a block's worth; the
    partial sums' JSON is that of the rows summed at once, the sums exact."""
    import tracemalloc

    import dparallel.store.stats as stats

    x = rng.random((20_000, 72)) * 10.0 ** rng.integers(-4, 3, size=72)  # features' spans
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        blocked = FeatureStats.of(x)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak < 2 * x.nbytes, peak / x.nbytes
    monkeypatch.setattr(stats, "_BLOCK_VALUES", x.size)
    assert blocked.to_json() == FeatureStats.of(x).to_json()
    for c in (0, 71):
        assert blocked.sum.fractions()[c] == sum(Fraction(v) for v in x[:, c])
