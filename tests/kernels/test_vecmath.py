"""The vectorisable elementary functions of the numba kernel against numpy (libm)."""

from __future__ import annotations

import numba
import numpy as np
import pytest

vm = pytest.importorskip("dparallel.kernels._vecmath")


@numba.njit
def _apply(kind: int, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    for q in range(x.shape[0]):
        if kind == 0:
            out[q] = vm.vexp(x[q])
        elif kind == 1:
            out[q] = vm.vtanh_pos(x[q])
        elif kind == 2:
            out[q] = vm.vcos_pi(x[q])
        elif kind == 4:
            out[q] = vm.vexp_like(vm.like(x[q], np.float32(0)))
        else:
            out[q] = vm.vsin_pi(x[q])
    return out


def _ulp_error(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(got - ref) / np.spacing(np.abs(ref))))


def test_exp_within_two_ulp() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-700, 700, 20000), rng.uniform(-1, 1, 20000), [0.0, -708.0]])
    assert _ulp_error(_apply(0, x), np.exp(x)) <= 2.0


def test_tanh_for_the_cutoff_argument() -> None:
    x = np.linspace(1e-6, 1.0, 20001)  # 1 - r/rc for r < rc
    got, ref = _apply(1, x), np.tanh(x)
    # (1 - e^{-2x}) / (1 + e^{-2x}): absolute error ~1e-16, relative ~1e-16 / x
    np.testing.assert_allclose(got, ref, rtol=0, atol=4e-16)
    np.testing.assert_allclose(got[x > 0.01], ref[x > 0.01], rtol=3e-14)


def test_cos_and_sin_of_pi_x_on_the_unit_interval() -> None:
    x = np.linspace(0.0, 1.0, 20001)
    np.testing.assert_allclose(_apply(2, x), np.cos(np.pi * x), rtol=0, atol=6e-16)
    np.testing.assert_allclose(_apply(3, x), np.sin(np.pi * x), rtol=0, atol=6e-16)


def test_float32_exp_relative_error_below_2e_7() -> None:
    x = np.random.default_rng(1).uniform(-87, 88, 50000).astype(np.float32).astype(np.float64)
    got = _apply(4, x)  # float32 in, float32 out
    np.testing.assert_allclose(got, np.exp(x), rtol=2e-7)


def test_exp_underflow_as_libm() -> None:
    """Below -708 e^x is subnormal and below about -745 zero, as libm: no clamped floor
    (a floor of e^-708 once made a constant η = 1e4 feature look non-constant)."""
    x = np.concatenate([np.linspace(-760.0, -700.0, 6001), [-1e4, -6.25e4, -1e300]])
    got, ref = _apply(0, x), np.exp(x)
    normal = ref >= np.finfo(np.float64).tiny
    assert _ulp_error(got[normal], ref[normal]) <= 2.0
    # subnormals: one more rounding, so within one unit of the smallest subnormal
    np.testing.assert_allclose(got[~normal], ref[~normal], rtol=0, atol=2 * 5e-324)
    assert np.all(got[x < -746.0] == 0.0)


def test_float32_exp_underflow_as_libm() -> None:
    x = np.concatenate([np.linspace(-110.0, -80.0, 3001), [-1e4]]).astype(np.float32)
    got = _apply(4, x.astype(np.float64))
    ref = np.exp(x)  # float32 libm
    tiny = np.finfo(np.float32).tiny
    normal = ref >= tiny
    np.testing.assert_allclose(got[normal], ref[normal], rtol=2e-7)
    np.testing.assert_allclose(got[~normal], ref[~normal], rtol=0, atol=2 * 1.5e-45)
    assert np.all(got[x < -104.0] == 0.0)
