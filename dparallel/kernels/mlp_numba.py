"""The atomic network inside the fused ACSF kernel: one centre's energy and ∂E/∂G
(forward, then backward) over dense row-major weights, as numba helpers."""

from __future__ import annotations

import math

from dparallel.kernels._numba_jit import REASSOC, _reduce_dot, jit_views
from dparallel.kernels._vecmath import vtanh_pos

__all__: list[str] = []


def _add_rows(mat, x, out):  # noqa: ANN001, ANN202
    """out[:n] += Σ_r x[r] mat[r, :n] for mat (m, n): axpys over contiguous rows, four rows
    per pass over out (a quarter of its loads and stores)."""
    m = mat.shape[0]
    n = mat.shape[1]
    for r4 in range(m // 4):
        r = 4 * r4
        x0 = x[r]
        x1 = x[r + 1]
        x2 = x[r + 2]
        x3 = x[r + 3]
        m0 = mat[r]
        m1 = mat[r + 1]
        m2 = mat[r + 2]
        m3 = mat[r + 3]
        for c in range(n):
            out[c] += (x0 * m0[c] + x1 * m1[c]) + (x2 * m2[c] + x3 * m3[c])
    for r in range(m - m % 4, m):
        xr = x[r]
        mr = mat[r]
        for c in range(n):
            out[c] += xr * mr[c]


def _matvec(mat, x, bias, out):  # noqa: ANN001, ANN202
    """out[o] = bias[o] + Σ_q mat[o, q] x[q] for mat (m, n): four rows at a time, so that
    their four sums share the loads of x and their horizontal reductions overlap."""
    m = mat.shape[0]
    n = mat.shape[1]
    for o4 in range(m // 4):
        o = 4 * o4
        m0 = mat[o]
        m1 = mat[o + 1]
        m2 = mat[o + 2]
        m3 = mat[o + 3]
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for q in range(n):  # vectorised over q (reassociated sums)
            xq = x[q]
            s0 += m0[q] * xq
            s1 += m1[q] * xq
            s2 += m2[q] * xq
            s3 += m3[q] * xq
        out[o] = bias[o] + s0
        out[o + 1] = bias[o + 1] + s1
        out[o + 2] = bias[o + 2] + s2
        out[o + 3] = bias[o + 3] + s3
    for o in range(m - m % 4, m):
        out[o] = bias[o] + _reduce_dot(mat[o], x, n)


def _network(net, g, acts, gcur, gnext, w):  # noqa: ANN001, ANN202
    """Atomic energy of descriptors g (F,) and w = ∂E/∂G (F,) (forward, then backward)."""
    n_l = net.layers.shape[0]
    h = acts[0]
    off0 = net.consts[0]
    for d in range(g.shape[0]):
        h[d] = (g[d] - net.shift[d]) * net.factor[d] + off0
    for layer in range(n_l):
        kind = net.layers[layer, 0]
        n_in = net.layers[layer, 1]
        n_out = net.layers[layer, 2]
        off = net.layers[layer, 3]
        src = acts[layer]
        dst = acts[layer + 1]
        if kind == 0:  # dst = b + W src, one dot product per output over a row of W
            wm = net.params[off : off + n_out * n_in].reshape((n_out, n_in))
            b0 = off + n_out * n_in
            # (axpys over rows of Wᵀ were slower per MD step: docs/kernels.md)
            _matvec(wm, src[:n_in], net.params[b0 : b0 + n_out], dst)
        elif kind == 1:
            for q in range(n_in):
                dst[q] = src[q] / net.params[off]
        else:
            for q in range(n_in):
                x = src[q]
                dst[q] = math.copysign(vtanh_pos(abs(x)), x)
    gcur[0] = net.consts[1]
    for layer in range(n_l - 1, -1, -1):
        kind = net.layers[layer, 0]
        n_in = net.layers[layer, 1]
        n_out = net.layers[layer, 2]
        off = net.layers[layer, 3]
        if kind == 0:
            wm = net.params[off : off + n_out * n_in].reshape((n_out, n_in))
            gnext[:n_in] = 0.0
            _add_rows(wm, gcur, gnext)
        elif kind == 1:
            for q in range(n_in):
                gnext[q] = gcur[q] / net.params[off]
        else:
            y = acts[layer + 1]
            for q in range(n_in):
                gnext[q] = gcur[q] * (1.0 - y[q] * y[q])
        gcur, gnext = gnext, gcur
    for d in range(g.shape[0]):
        w[d] = gcur[d] * net.factor[d]
    return acts[n_l][0] * net.consts[1] + net.consts[2]


_add_rows = jit_views(REASSOC)(_add_rows)
_matvec = jit_views(REASSOC)(_matvec)
_network = jit_views(REASSOC)(_network)
