"""dparallel.deploy.identical: shape, dtype and bytes, as a result cache needs."""

from __future__ import annotations

import numpy as np

from dparallel.deploy.identical import identical


def test_same_values_shape_and_dtype_only() -> None:
    a = np.arange(6.0).reshape(2, 3)
    assert identical(a, a.copy()) and identical(a[:, ::2], np.ascontiguousarray(a[:, ::2]))
    b = a.copy()
    b[1, 2] = np.nextafter(b[1, 2], np.inf)
    assert not identical(a, b)
    assert not identical(a, a.reshape(3, 2)) and not identical(a, a.astype(np.float32))
    assert not identical(np.zeros(2), -np.zeros(2))  # array_equal calls these equal
    assert identical(np.full(2, np.nan), np.full(2, np.nan))  # a deterministic input
