"""Branch-free elementary functions that LLVM can vectorise inside numba loops.

numba's ``math.exp``/``math.cos`` are libm calls that keep a loop scalar (docs/acsf.md);
these are plain arithmetic plus bit casts, about 1 ulp in float64, for the argument ranges
the ACSF kernels use (documented per function).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, overload

import dparallel.kernels._numba_jit  # noqa: F401 - keys the disk cache before anything compiles

__all__ = ["like", "vcos_pi", "vexp", "vexp32", "vexp_like", "vsin_pi", "vtanh_pos"]

_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 split for an exact n·ln2_hi (Cody-Waite)
_LN2_LO = 1.90821492927058770002e-10
_SHIFT = 6755399441055744.0  # 1.5·2^52: adding it rounds to an integer kept in the low bits
_SHIFT_BITS = 0x4338000000000000  # bit pattern of _SHIFT


def _bitcast(src: types.Type, dst: types.Type, dst_ir: ir.Type):  # noqa: ANN202
    """An intrinsic reinterpreting the bits of a ``src`` value as ``dst`` (LLVM bitcast, so
    vectorisable); an integer argument wider than ``dst`` is truncated to its low bits."""
    bits = dst.bitwidth

    @intrinsic
    def cast(typingctx, x):  # noqa: ANN001, ANN202
        if not (x == src or (isinstance(src, types.Integer) and isinstance(x, types.Integer))):
            return None

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            v = args[0]
            arg = signature.args[0]
            if isinstance(arg, types.Integer) and arg.bitwidth > bits:
                v = builder.trunc(v, ir.IntType(bits))
            return builder.bitcast(v, dst_ir)

        return dst(x), codegen

    return cast


_f64_bits = _bitcast(types.float64, types.int64, ir.IntType(64))
_bits_f64 = _bitcast(types.int64, types.float64, ir.DoubleType())
_f32_bits = _bitcast(types.float32, types.int32, ir.IntType(32))
_bits_f32 = _bitcast(types.int32, types.float32, ir.FloatType())


@numba.njit(cache=True, error_model="numpy")
def vexp(x: float) -> float:
    """e^x for x ≤ 709 (clamped above), ≤ 2 ulp; subnormal results below -708 and 0 below
    about -745, as libm (2^n is applied as two normal factors, so no clamp shows)."""
    x = min(max(x, -746.0), 709.0)
    t = x * _LOG2E + _SHIFT
    n = t - _SHIFT  # round(x / ln 2)
    r = x - n * _LN2_HI
    r = r - n * _LN2_LO  # |r| ≤ ln2/2
    # Taylor to r^13: truncation < 2e-17 on |r| ≤ 0.347
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    k = _f64_bits(t) - _SHIFT_BITS  # n as an integer, -1076 ≤ n ≤ 1023
    k1 = k >> 1
    scale1 = _bits_f64((k1 + 1023) << 52)  # 2^n = 2^k1 · 2^(n-k1), both normal
    scale2 = _bits_f64((k - k1 + 1023) << 52)
    return p * scale1 * scale2


@intrinsic
def like(typingctx, value, ref):  # noqa: ANN001, ANN202
    """``value`` converted to the (float) type of ``ref``: typed constants in generic code."""
    if not isinstance(ref, types.Float):
        return None

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return context.cast(builder, args[0], signature.args[0], signature.return_type)

    return ref(value, ref), codegen


_F = np.float32
_C32 = tuple(_F(1.0 / math.factorial(n)) for n in range(8))
_LOG2E_32 = _F(_LOG2E)
_SHIFT_32 = _F(12582912.0)  # 1.5·2^23
_LN2_HI_32 = _F(0.693359375)
_LN2_LO_32 = _F(-2.12194440e-4)
_LO_32, _HI_32 = _F(-104.0), _F(88.0)


@numba.njit(cache=True, error_model="numpy")
def vexp32(x: np.float32) -> np.float32:
    """e^x in float32 for x ≤ 88 (clamped above), relative error < 1e-7 down to -87,
    subnormal results below and 0 below about -104 (as libm)."""
    x = min(max(x, _LO_32), _HI_32)
    t = x * _LOG2E_32 + _SHIFT_32
    n = t - _SHIFT_32
    r = x - n * _LN2_HI_32
    r = r - n * _LN2_LO_32
    p = _C32[7]
    p = p * r + _C32[6]
    p = p * r + _C32[5]
    p = p * r + _C32[4]
    p = p * r + _C32[3]
    p = p * r + _C32[2]
    p = p * r + _C32[1]
    p = p * r + _C32[0]
    k = _f32_bits(t) - 0x4B400000  # n as an integer, -150 ≤ n ≤ 127
    k1 = k >> 1
    scale1 = _bits_f32((k1 + 127) << 23)  # 2^n = 2^k1 · 2^(n-k1), both normal
    scale2 = _bits_f32((k - k1 + 127) << 23)
    return p * scale1 * scale2


def vexp_like(x):  # noqa: ANN001, ANN201
    """e^x in the precision of x (float32 or float64), vectorisable."""
    raise NotImplementedError("only callable from numba-compiled code")


@overload(vexp_like)
def _vexp_like(x):  # noqa: ANN001, ANN202
    if x == types.float32:
        return lambda x: vexp32(x)
    return lambda x: vexp(x)


@numba.njit(cache=True, error_model="numpy")
def vtanh_pos(x: float) -> float:
    """tanh(x) for x ≥ 0 via one exponential; relative error ≲ 1e-16/x near 0."""
    e = vexp(-2.0 * x)
    return (1.0 - e) / (1.0 + e)


# sin(π y) = π y · S(y²) and cos(π y) = C(y²) on |y| ≤ 1/2 (Taylor, error < 1e-17)
_PI = math.pi


@numba.njit(cache=True, error_model="numpy")
def _sin_pi_half(y: float) -> float:
    """sin(π y) for |y| ≤ 1/2."""
    z = _PI * y
    z2 = z * z
    p = -1.0 / 1.21645100408832e17  # -1/19!
    p = p * z2 + 1.0 / 355687428096000.0  # 1/17!
    p = p * z2 - 1.0 / 1307674368000.0  # -1/15!
    p = p * z2 + 1.0 / 6227020800.0  # 1/13!
    p = p * z2 - 1.0 / 39916800.0  # -1/11!
    p = p * z2 + 1.0 / 362880.0  # 1/9!
    p = p * z2 - 1.0 / 5040.0
    p = p * z2 + 1.0 / 120.0
    p = p * z2 - 1.0 / 6.0
    return z + z * z2 * p


@numba.njit(cache=True, error_model="numpy")
def _cos_pi_half(y: float) -> float:
    """cos(π y) for |y| ≤ 1/2."""
    z2 = (_PI * y) * (_PI * y)
    p = 1.0 / 2.43290200817664e18  # 1/20!
    p = p * z2 - 1.0 / 6402373705728000.0  # -1/18!
    p = p * z2 + 1.0 / 20922789888000.0  # 1/16!
    p = p * z2 - 1.0 / 87178291200.0  # -1/14!
    p = p * z2 + 1.0 / 479001600.0  # 1/12!
    p = p * z2 - 1.0 / 3628800.0  # -1/10!
    p = p * z2 + 1.0 / 40320.0
    p = p * z2 - 1.0 / 720.0
    p = p * z2 + 1.0 / 24.0
    p = p * z2 - 0.5
    return 1.0 + z2 * p


@numba.njit(cache=True, error_model="numpy")
def vcos_pi(x: float) -> float:
    """cos(π x) for x in [0, 1]: −sin(π (x − 1/2))."""
    return -_sin_pi_half(x - 0.5)


@numba.njit(cache=True, error_model="numpy")
def vsin_pi(x: float) -> float:
    """sin(π x) for x in [0, 1]: cos(π (x − 1/2))."""
    return _cos_pi_half(x - 0.5)
