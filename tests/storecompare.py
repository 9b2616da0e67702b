"""Two stores' arrays compared bitwise (no pytest here)."""

from __future__ import annotations

from typing import Any


def assert_same_arrays(a: Any, b: Any, at_least: int = 20) -> None:
    """The zarr groups ``a`` and ``b`` hold the same arrays (more than ``at_least``), each
    of the same dtype, shape and bytes."""
    import zarr

    names = sorted(k for k, v in a.members(max_depth=None) if isinstance(v, zarr.Array))
    assert names == sorted(k for k, v in b.members(max_depth=None) if isinstance(v, zarr.Array))
    assert len(names) > at_least
    for name in names:
        x, y = a[name][...], b[name][...]
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes(), name
