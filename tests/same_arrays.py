"""Two zarr stores hold the same arrays, bit for bit (attributes aside: run metadata)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import zarr

if TYPE_CHECKING:
    from pathlib import Path


def store_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of the zarr group at ``path`` by its path (no attributes: run metadata)."""
    out: dict[str, np.ndarray] = {}

    def walk(group: zarr.Group, prefix: str) -> None:
        for name, array in group.arrays():
            out[prefix + name] = array[...]
        for name, sub in group.groups():
            walk(sub, f"{prefix}{name}/")

    walk(zarr.open_group(path, mode="r"), "")
    return out


def assert_same_arrays(a: Path, b: Path) -> None:
    """Every array of the stores at ``a`` and ``b`` equal: names, dtypes and values (NaN
    equal to NaN)."""
    ours, theirs = store_arrays(a), store_arrays(b)
    assert sorted(ours) == sorted(theirs)
    for name, value in ours.items():
        assert value.dtype == theirs[name].dtype, name
        assert np.array_equal(value, theirs[name], equal_nan=value.dtype.kind == "f"), name
