"""Per-neighbour parts of the compiled ACSF kernel: the cutoff functions (n2p2 types 0-8)
over a run of distances, and one centre's radial (type 2) sums and their derivatives."""

from __future__ import annotations

import math

from dparallel.kernels._numba_jit import CONTRACT, _reduce_dot, jit, jit_views
from dparallel.kernels._vecmath import vcos_pi, vexp, vsin_pi, vtanh_pos

__all__: list[str] = []

_TANH1_3 = math.tanh(1.0) ** 3
_PI_2 = 0.5 * math.pi


def _cutoff_fill(r, n, rc, kind, alpha, f, df, want_df):  # noqa: ANN001, ANN202
    """f[q], df[q] = f_c(r[q]), f_c'(r[q]) for q < n (n2p2 types 0-8, 0 for r ≥ rc)."""
    if kind == 2 or kind == 3:
        norm = 1.0 / _TANH1_3 if kind == 3 else 1.0
        inv = 1.0 / rc
        for q in range(n):
            t = vtanh_pos(1.0 - r[q] * inv)
            v = t * t * t * norm
            d = -3.0 * t * t * (1.0 - t * t) * inv * norm
            inside = r[q] < rc
            f[q] = v if inside else 0.0
            if want_df:
                df[q] = d if inside else 0.0
        return
    if kind == 0:
        for q in range(n):
            f[q] = 1.0 if r[q] < rc else 0.0
            if want_df:
                df[q] = 0.0
        return
    rci = alpha * rc
    iw = 1.0 / (rc - rci)
    # one loop per kind (a kind test inside the loop kept it from vectorising: docs/kernels.md);
    # x = (r - rci)/(rc - rci) clamped to [0, 1]: f(0) = 1, f'(0) = 0 below rci
    if kind == 1:
        for q in range(n):
            x = _unit(r[q], rci, iw)
            _put(f, df, q, r[q] < rc, want_df, 0.5 * (vcos_pi(x) + 1.0),
                 -_PI_2 * iw * vsin_pi(x))  # fmt: skip
    elif kind == 4:
        for q in range(n):
            x = _unit(r[q], rci, iw)
            om = max(1.0 - x * x, 1e-300)
            v = vexp(1.0 - 1.0 / om)
            _put(f, df, q, r[q] < rc, want_df, v, -2.0 * x * v / (om * om) * iw)
    elif kind == 5:
        for q in range(n):
            x = _unit(r[q], rci, iw)
            _put(f, df, q, r[q] < rc, want_df, (2.0 * x - 3.0) * x * x + 1.0,
                 (6.0 * x - 6.0) * x * iw)  # fmt: skip
    elif kind == 6:
        for q in range(n):
            x = _unit(r[q], rci, iw)
            x2 = x * x
            _put(f, df, q, r[q] < rc, want_df, ((15.0 - 6.0 * x) * x - 10.0) * x2 * x + 1.0,
                 x2 * ((60.0 - 30.0 * x) * x - 30.0) * iw)  # fmt: skip
    elif kind == 7:
        for q in range(n):
            x = _unit(r[q], rci, iw)
            x3 = x * x * x
            v = (x * (x * (20.0 * x - 70.0) + 84.0) - 35.0) * x3 * x + 1.0
            d = x3 * (x * (x * (140.0 * x - 420.0) + 420.0) - 140.0) * iw
            _put(f, df, q, r[q] < rc, want_df, v, d)
    else:
        for q in range(n):
            x = _unit(r[q], rci, iw)
            x4 = x * x * x * x
            v = (x * (x * ((315.0 - 70.0 * x) * x - 540.0) + 420.0) - 126.0) * x4 * x + 1.0
            d = x4 * (x * (x * ((2520.0 - 630.0 * x) * x - 3780.0) + 2520.0) - 630.0) * iw
            _put(f, df, q, r[q] < rc, want_df, v, d)


def _unit(r, rci, iw):  # noqa: ANN001, ANN202
    """(r - rci)/(rc - rci) clamped to [0, 1]."""
    return min(max((r - rci) * iw, 0.0), 1.0)


def _put(f, df, q, inside, want_df, v, d):  # noqa: ANN001, ANN202
    """f[q], df[q] = v, d inside the cutoff, else 0."""
    f[q] = v if inside else 0.0
    if want_df:
        df[q] = d if inside else 0.0


def _radial(plan, blk, rr, fcn, dfcn, g_tmp, d_rad, g_rad, derivatives):  # noqa: ANN001, ANN202
    """One centre's radial (type 2) sums g_rad and, with ``derivatives``, a'(r_ij) per radial
    key in d_rad, over the neighbours of each element block (slices: contiguous loads)."""
    for f in range(blk.shape[0] - 1):
        m0 = blk[f]
        nm = blk[f + 1] - m0
        r = rr[m0 : m0 + nm]
        gt = g_tmp[m0 : m0 + nm]
        for kr in range(plan.rk_off[f], plan.rk_off[f + 1]):
            eta = plan.rk_eta[kr]
            rs = plan.rk_rs[kr]
            fc = fcn[plan.rk_cut[kr], m0 : m0 + nm]
            dfc = dfcn[plan.rk_cut[kr], m0 : m0 + nm]
            dr = d_rad[kr, m0 : m0 + nm]
            for m in range(nm):  # vectorised; the sum below may be reordered
                d = r[m] - rs
                g = vexp(-eta * d * d)
                gt[m] = g
                if derivatives:
                    dr[m] = g * (dfc[m] - 2.0 * eta * d * fc[m])
            g_rad[kr] = _reduce_dot(gt, fc, nm)


_unit = jit(CONTRACT)(_unit)
_put = jit(CONTRACT)(_put)
_cutoff_fill = jit_views(CONTRACT)(_cutoff_fill)
_radial = jit_views(CONTRACT)(_radial)
