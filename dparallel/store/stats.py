"""Exact, order-independent feature statistics that merge across partitions.

Each partition returns a :class:`FeatureStats` (count, min, max and *exact* sums of values
and of squared values, each square as fl(x·x) plus its rounding error, so that a constant
feature's σ is 0, not the ~1e-8·|x| that fl(x·x) alone leaves); the client merges them in
any order and gets bit-identical results whatever the partitioning or the number of
workers. Sums are exact because every float64 ``x = M · 2**(e - 53)`` (integer mantissa
``M``) is accumulated into integer buckets per binary exponent ``e``; only the final
conversion to float rounds (correctly, once). Pure logic: no I/O, no Dask.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "FEATURE_LIMIT",
    "ExactSum",
    "FeatureStats",
    "merge_into",
    "out_of_range",
    "statistics_of",
    "summaries",
]

#: The largest magnitude a stored feature value or derivative may have: float32's largest
#: (no descriptor comes near it; beyond it a value overflows a float32 training).
FEATURE_LIMIT = float(np.finfo(np.float32).max)

_MAX_ROWS = 1 << 25
#: Values per block of rows :meth:`FeatureStats.of` sums at a time: its exact sums' float64
#: and int64 temporaries took ~90 bytes a value on a whole partition's features at once
#: (11× the values' bytes; 6.5 kB an atom of 72 features), ~13 MB a block instead
#: (docs/store-format.md).
_BLOCK_VALUES = 1 << 17
_HALF = 26  # mantissas are split in two halves of ≤ 27 bits so int64 sums cannot overflow


def out_of_range(values: np.ndarray) -> np.ndarray | None:
    """Where ``values`` (a stored feature array) hold a value that is not finite or beyond
    :data:`FEATURE_LIMIT` (a bool mask; ``None`` where none does): damage, which training
    would meet only as a diverged model. On every read, so one vectorised pass when there
    is none: a finite Σx² ≤ FEATURE_LIMIT² bounds every |x| (NaN and inf propagate into
    it); only a sum beyond that (overflow, or damage) is looked at value by value."""
    if not values.size or values.dtype.kind != "f":
        return None
    flat = values.ravel(order="K")  # a view of a contiguous array
    with np.errstate(over="ignore", invalid="ignore"):  # inf or NaN: looked at below
        if float(np.dot(flat, flat)) <= FEATURE_LIMIT**2:
            return None
    bad = ~(np.abs(values) <= FEATURE_LIMIT)  # NaN too
    return bad if bad.any() else None


@dataclass(frozen=True)
class ExactSum:
    """Exact sum of float64 values per column, as integer mantissa buckets per exponent.

    ``buckets[c]`` maps a binary exponent ``e`` to an integer ``m`` so that the column sum is
    ``Σ_e m · 2**(e - 53)`` exactly.
    """

    buckets: tuple[dict[int, int], ...]

    @staticmethod
    def of(values: np.ndarray) -> ExactSum:
        """Exact column sums of ``values`` (n, F) — vectorised, no loop over rows."""
        x = np.asarray(values, dtype=np.float64)
        if x.ndim != 2:
            raise ValueError(f"expected a 2-D array (n, F), got shape {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError("cannot sum non-finite values exactly")
        n_cols = x.shape[1]
        mantissa, exponent = np.frexp(x)  # x = mantissa · 2**exponent, |mantissa| in [0.5, 1)
        m = (mantissa * 2.0**53).astype(np.int64)  # exact: 53-bit integer mantissa
        hi, lo = m >> _HALF, m & ((1 << _HALF) - 1)  # m = hi·2**26 + lo, both exact
        buckets: list[dict[int, int]] = [{} for _ in range(n_cols)]
        if x.size == 0:
            return ExactSum(tuple(buckets))
        if x.shape[0] > _MAX_ROWS:  # keep every float64 bucket sum below 2**53 (exact)
            parts = [ExactSum.of(x[a : a + _MAX_ROWS]) for a in range(0, x.shape[0], _MAX_ROWS)]
            return sum(parts[1:], parts[0])
        exp_min = int(exponent.min())
        span = int(exponent.max()) - exp_min + 1
        keys = (np.arange(n_cols, dtype=np.int64) * span + (exponent - exp_min)).ravel()
        # |hi|, lo < 2**27 and ≤ 2**25 rows per bucket: float64 bincount sums are exact.
        hi_sum = np.bincount(keys, weights=hi.ravel(), minlength=n_cols * span)
        lo_sum = np.bincount(keys, weights=lo.ravel(), minlength=n_cols * span)
        for key in np.flatnonzero((hi_sum != 0) | (lo_sum != 0)).tolist():
            total = (int(hi_sum[key]) << _HALF) + int(lo_sum[key])
            if total:
                col, offset = divmod(key, span)
                buckets[col][offset + exp_min] = total
        return ExactSum(tuple(buckets))

    @staticmethod
    def zeros(n_cols: int) -> ExactSum:
        """The exact zero for ``n_cols`` columns."""
        return ExactSum(tuple({} for _ in range(n_cols)))

    def __add__(self, other: ExactSum) -> ExactSum:
        if len(self.buckets) != len(other.buckets):
            raise ValueError(f"column counts differ: {len(self.buckets)} vs {len(other.buckets)}")
        merged = []
        for a, b in zip(self.buckets, other.buckets, strict=True):
            out = dict(a)
            for exp, m in b.items():
                out[exp] = out.get(exp, 0) + m
            # as :meth:`of` makes them: exponents ascending, no zero total (the same JSON
            # whichever blocks the rows were summed in)
            merged.append({e: out[e] for e in sorted(out) if out[e]})
        return ExactSum(tuple(merged))

    def fractions(self) -> list[Fraction]:
        """The exact column sums as fractions: per column the buckets shifted onto their
        lowest exponent and added as integers, then one fraction (one gcd), instead of one
        fraction addition per bucket (docs/workflows.md gives the gain)."""
        out = []
        for col in self.buckets:
            if not col:
                out.append(Fraction(0))
                continue
            low = min(col)
            total = sum(m << (e - low) for e, m in col.items())  # Σ m·2**(e - low), exact
            scale = low - 53  # the sum is total · 2**scale
            out.append(Fraction(total << scale) if scale >= 0 else Fraction(total, 1 << -scale))
        return out

    def to_json(self) -> list[dict[str, str]]:
        """JSON-safe form (integers as strings: they can exceed 2**63)."""
        return [{str(e): str(m) for e, m in col.items()} for col in self.buckets]

    @staticmethod
    def from_json(data: Sequence[dict[str, str]]) -> ExactSum:
        """Inverse of :meth:`to_json`."""
        return ExactSum(tuple({int(e): int(m) for e, m in col.items()} for col in data))


_SPLIT = float(2**27 + 1)  # Veltkamp's splitter for float64


def _exact_sum_of_squares(x: np.ndarray) -> ExactSum:
    """Exact column sums of x² for ``x`` (n, F): x·x = p + err exactly, p = fl(x·x) and err
    its rounding error by Dekker's product (x split into two halves of ≤ 26 bits,
    Veltkamp's splitter). x·x alone is rounded: Σx² − (Σx)²/n of a constant column would be
    n times its rounding error, and σ ~1e-8·|x| instead of 0. Squares that underflow
    (|x| < ~1e-150) are not exact; features that small are zero for training's purposes."""
    big = _SPLIT * x
    hi = big - (big - x)
    lo = x - hi
    p = x * x
    err = ((hi * hi - p) + 2.0 * hi * lo) + lo * lo
    return ExactSum.of(p) + ExactSum.of(err)


@dataclass(frozen=True)
class FeatureStats:
    """Mergeable statistics of F features: count, min, max, exact Σx and Σx²."""

    count: int
    minimum: np.ndarray  # (F,)
    maximum: np.ndarray  # (F,)
    sum: ExactSum
    sum_squares: ExactSum

    @staticmethod
    def of(values: np.ndarray) -> FeatureStats:
        """Statistics of the rows of ``values`` (n, F)."""
        x = np.asarray(values, dtype=np.float64)
        n_features = x.shape[1]
        if x.shape[0] == 0:
            return FeatureStats.empty(n_features)
        rows = max(1, _BLOCK_VALUES // max(n_features, 1))  # exact sums: any blocks
        total = squares = ExactSum.zeros(n_features)
        for a in range(0, x.shape[0], rows):
            total += ExactSum.of(x[a : a + rows])
            squares += _exact_sum_of_squares(x[a : a + rows])
        return FeatureStats(
            count=int(x.shape[0]),
            minimum=x.min(axis=0),
            maximum=x.max(axis=0),
            sum=total,
            sum_squares=squares,
        )

    @staticmethod
    def empty(n_features: int) -> FeatureStats:
        """Statistics of no rows (identity of :meth:`merge`)."""
        return FeatureStats(
            count=0,
            minimum=np.full(n_features, np.inf),
            maximum=np.full(n_features, -np.inf),
            sum=ExactSum.zeros(n_features),
            sum_squares=ExactSum.zeros(n_features),
        )

    @property
    def n_features(self) -> int:
        """Number of features F."""
        return int(self.minimum.shape[0])

    def merge(self, other: FeatureStats) -> FeatureStats:
        """Statistics of the union of both row sets (commutative, associative, exact)."""
        return FeatureStats(
            count=self.count + other.count,
            minimum=np.minimum(self.minimum, other.minimum),
            maximum=np.maximum(self.maximum, other.maximum),
            sum=self.sum + other.sum,
            sum_squares=self.sum_squares + other.sum_squares,
        )

    @property
    def mean(self) -> np.ndarray:
        """Mean per feature (NaN when empty), correctly rounded from exact sums."""
        if self.count == 0:
            return np.full(self.n_features, np.nan)
        return np.array([float(s / self.count) for s in self.sum.fractions()])

    @property
    def sigma(self) -> np.ndarray:
        """Standard deviation with n − 1 (n2p2's ``sigma``); 0 for a single row."""
        if self.count == 0:
            return np.full(self.n_features, np.nan)
        if self.count == 1:
            return np.zeros(self.n_features)
        n = self.count
        out = []
        for s, s2 in zip(self.sum.fractions(), self.sum_squares.fractions(), strict=True):
            var = (s2 - s * s / n) / (n - 1)
            out.append(float(max(var, Fraction(0))) ** 0.5)
        return np.array(out)

    def summary(self) -> dict[str, Any]:
        """The store's ``statistics`` record of an element (count, min, max, mean, sigma:
        n2p2's ``scaling.data`` columns), what training scales its inputs by."""
        return {
            "count": self.count,
            "min": self.minimum.tolist(),
            "max": self.maximum.tolist(),
            "mean": self.mean.tolist(),
            "sigma": self.sigma.tolist(),
        }

    def to_json(self) -> dict[str, Any]:
        """JSON-safe form of the partial sums, for task reports (merged by the client)."""
        return {
            "count": self.count,
            "min": self.minimum.tolist(),
            "max": self.maximum.tolist(),
            "sum": self.sum.to_json(),
            "sum_squares": self.sum_squares.to_json(),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> FeatureStats:
        """Inverse of :meth:`to_json`."""
        return FeatureStats(
            count=int(data["count"]),
            minimum=np.asarray(data["min"], dtype=np.float64),
            maximum=np.asarray(data["max"], dtype=np.float64),
            sum=ExactSum.from_json(data["sum"]),
            sum_squares=ExactSum.from_json(data["sum_squares"]),
        )


def summaries(per_element: Mapping[str, FeatureStats]) -> dict[str, dict[str, Any]]:
    """Each element's :meth:`FeatureStats.summary`, the record training scales by; an
    element without atoms has none (not min inf, max −inf and NaN moments)."""
    return {e: s.summary() for e, s in per_element.items() if s.count}


def merge_into(found: dict[str, FeatureStats], key: str, stats: FeatureStats) -> None:
    """Merge ``stats`` into ``found[key]`` (set it when absent): how featurize's partitions'
    statistics and training's add up."""
    found[key] = found[key].merge(stats) if key in found else stats


def statistics_of(
    computed: Mapping[str, Mapping[str, Mapping[str, np.ndarray]]],
) -> dict[str, dict[str, FeatureStats]]:
    """``{name: {element: FeatureStats}}`` of the ``values`` of descriptor arrays as
    :meth:`DescriptorSet.compute` returns them (``{name: {element: arrays}}``): what a
    featurize task reports for its partition and training computes without a store's record."""
    return {
        name: {element: FeatureStats.of(arrays["values"]) for element, arrays in per.items()}
        for name, per in computed.items()
    }
