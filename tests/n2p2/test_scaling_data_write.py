"""write_scaling_data: elements by atomic number, rows in the order the ACSF asks for."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dparallel.n2p2.scaling_data import read_scaling_data, write_scaling_data
from dparallel.store.stats import FeatureStats

if TYPE_CHECKING:
    from pathlib import Path


class _Reversed:
    """Stands in for an ACSF whose n2p2 order is its column order reversed."""

    def __init__(self, n: int, elements: tuple[str, ...] = ("H", "O")) -> None:
        self.n, self.elements = n, list(elements)

    def n_features(self, element: str) -> int:
        return self.n

    def n2p2_order(self, element: str) -> list[int]:
        return list(range(self.n))[::-1]


def test_elements_by_atomic_number_and_rows_permuted(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    stats = {
        "O": FeatureStats.of(rng.normal(size=(9, 3))),
        "H": FeatureStats.of(rng.normal(size=(5, 3))),
    }
    plain, permuted = tmp_path / "plain.data", tmp_path / "permuted.data"
    write_scaling_data(plain, stats)
    write_scaling_data(permuted, stats, _Reversed(3))  # type: ignore[arg-type]
    back = read_scaling_data(plain, {"H": 3, "O": 3})
    for e in ("H", "O"):
        s = stats[e]
        expected = np.stack([s.minimum, s.maximum, s.mean, s.sigma], 1)
        np.testing.assert_array_equal(back[e], expected)
        np.testing.assert_array_equal(
            read_scaling_data(permuted, {"H": 3, "O": 3})[e], expected[::-1]
        )
    assert read_scaling_data(plain, {"H": 3, "O": 3})["H"][0, 0] == stats["H"].minimum[0]
