"""Compiled (numba) triplet loop for ACSF angular terms: the fast CPU path.

Same mathematics as the torch path in :mod:`dparallel.descriptors._acsf_engine`, which
stays the reference (and the only path that autograd can differentiate). Per-pair radial
factors are computed in torch beforehand; this loop handles the O(Σ n_i²) triplets
without materialising them, so its extra memory is O(P · n_el · K_a) for derivatives.
"""

from __future__ import annotations

import math

import numpy as np

from dparallel.errors import BackendUnavailableError

__all__ = ["angular_loop", "numba_available"]

try:  # pragma: no cover - exercised when numba is installed
    import numba

    _HAVE_NUMBA = True
except ImportError:  # pragma: no cover
    _HAVE_NUMBA = False

_TANH1_3 = math.tanh(1.0) ** 3


def numba_available() -> bool:
    """Whether the compiled backend can be used."""
    return _HAVE_NUMBA


def _cutoff(r: float, rc: float, kind: int, alpha: float) -> tuple[float, float]:
    """n2p2 cutoff f_c(r) and df_c/dr (scalar)."""
    if r >= rc:
        return 0.0, 0.0
    if kind == 2 or kind == 3:
        t = math.tanh(1.0 - r / rc)
        f = t * t * t
        df = -3.0 * t * t * (1.0 - t * t) / rc
        if kind == 3:
            return f / _TANH1_3, df / _TANH1_3
        return f, df
    if kind == 0:
        return 1.0, 0.0
    rci = alpha * rc
    if r < rci:
        return 1.0, 0.0
    w = rc - rci
    x = (r - rci) / w
    if kind == 1:
        return 0.5 * (math.cos(math.pi * x) + 1.0), -0.5 * math.pi * math.sin(math.pi * x) / w
    if kind == 4:
        om = 1.0 - x * x
        f = math.exp(1.0 - 1.0 / om)
        return f, -2.0 * x * f / (om * om) / w
    if kind == 5:
        return (2.0 * x - 3.0) * x * x + 1.0, (6.0 * x - 6.0) * x / w
    if kind == 6:
        x2 = x * x
        return ((15.0 - 6.0 * x) * x - 10.0) * x2 * x + 1.0, x2 * ((60.0 - 30.0 * x) * x - 30.0) / w
    if kind == 7:
        x3 = x * x * x
        f = (x * (x * (20.0 * x - 70.0) + 84.0) - 35.0) * x3 * x + 1.0
        return f, x3 * (x * (x * (140.0 * x - 420.0) + 420.0) - 140.0) / w
    x4 = x * x * x * x
    f = (x * (x * ((315.0 - 70.0 * x) * x - 540.0) + 420.0) - 126.0) * x4 * x + 1.0
    return f, x4 * (x * (x * ((2520.0 - 630.0 * x) * x - 3780.0) + 2520.0) - 630.0) / w


def _angular_loop(
    unit,  # (P, 3) float64
    r,  # (P,) float64
    seg,  # (n_e + 1,) int64 pair range of each centre
    nbr_el,  # (P,) int64
    a_p,  # (P, n_E) per-pair radial factors
    da_p,  # (P, n_E)
    n_narrow,  # narrow keys come first among the n_E keys
    e_eta,  # (n_E,)
    e_rs,
    e_rc,
    e_kind,  # (n_E,) int64
    e_alpha,
    z_zeta,  # (n_Z,)
    z_lam,
    z_int,  # (n_Z,) int64: integer ζ or -1
    ecol,  # (K_a,) int64
    zcol,  # (K_a,) int64
    pt_table,  # (n_el, n_el) int64
    ang_acc,  # (n_e, n_pt, K_a) out
    derivatives,
    coef_p,  # (P, n_el, K_a) out
    ang_q,  # (P, n_el, K_a, 3) out
):
    n_e = seg.shape[0] - 1
    n_E = a_p.shape[1]
    n_Z = z_zeta.shape[0]
    k_a = ecol.shape[0]
    full = np.empty(n_E)
    xj = np.empty(n_E)
    xk = np.empty(n_E)
    gj = np.zeros(n_E)
    gk = np.zeros(n_E)
    zv = np.empty(n_Z)
    dz = np.empty(n_Z)
    pre = np.empty(n_Z)
    for z in range(n_Z):
        pre[z] = 2.0 ** (1.0 - z_zeta[z])
    # a triplet with r_jk beyond every narrow cutoff contributes nothing if all keys are narrow
    skip_rc = 0.0
    if n_narrow == n_E:
        for e in range(n_E):
            skip_rc = max(skip_rc, e_rc[e])
    for i in range(n_e):
        s0 = seg[i]
        s1 = seg[i + 1]
        for j in range(s0, s1):
            rj = r[j]
            elj = nbr_el[j]
            for k in range(j + 1, s1):
                rk = r[k]
                elk = nbr_el[k]
                c = unit[j, 0] * unit[k, 0] + unit[j, 1] * unit[k, 1] + unit[j, 2] * unit[k, 2]
                rjk = 0.0
                if n_narrow > 0:
                    rjk = math.sqrt(max(rj * rj + rk * rk - 2.0 * rj * rk * c, 0.0))
                    if n_narrow == n_E and rjk >= skip_rc:
                        continue
                fc = 0.0
                dfc = 0.0
                for e in range(n_E):
                    pr = a_p[j, e] * a_p[k, e]
                    b = 1.0
                    db = 0.0
                    if e < n_narrow:
                        if (
                            e == 0
                            or e_rc[e] != e_rc[e - 1]
                            or e_kind[e] != e_kind[e - 1]
                            or e_alpha[e] != e_alpha[e - 1]
                        ):
                            fc, dfc = _cutoff(rjk, e_rc[e], e_kind[e], e_alpha[e])
                        d = rjk - e_rs[e]
                        g = math.exp(-e_eta[e] * d * d)
                        b = g * fc
                        db = g * (dfc - 2.0 * e_eta[e] * d * fc)
                    full[e] = pr * b
                    if derivatives:
                        xj[e] = da_p[j, e] * a_p[k, e] * b
                        xk[e] = a_p[j, e] * da_p[k, e] * b
                        if e < n_narrow:
                            gg = pr * db / rjk
                            gj[e] = gg * rj
                            gk[e] = gg * rk
                            xj[e] += gj[e]
                            xk[e] += gk[e]
                for z in range(n_Z):
                    base = 1.0 + z_lam[z] * c
                    if base <= 0.0:  # n2p2: no contribution where 1 + λ cos θ ≤ 0
                        zv[z] = 0.0
                        dz[z] = 0.0
                        continue
                    if z_int[z] >= 1:
                        pm1 = 1.0
                        for _ in range(z_int[z] - 1):
                            pm1 *= base
                    else:
                        pm1 = base ** (z_zeta[z] - 1.0)
                    zv[z] = pre[z] * pm1 * base
                    dz[z] = pre[z] * z_zeta[z] * z_lam[z] * pm1
                p = pt_table[elj, elk]
                for col in range(k_a):
                    e = ecol[col]
                    z = zcol[col]
                    ang_acc[i, p, col] += full[e] * zv[z]
                if derivatives:
                    inv_j = 1.0 / rj
                    inv_k = 1.0 / rk
                    for col in range(k_a):
                        e = ecol[col]
                        z = zcol[col]
                        a1 = dz[z] * full[e]
                        pj = zv[z] * xj[e] - a1 * c * inv_j
                        pk = zv[z] * xk[e] - a1 * c * inv_k
                        qj = a1 * inv_j
                        qk = a1 * inv_k
                        if e < n_narrow:
                            qj -= zv[z] * gk[e]
                            qk -= zv[z] * gj[e]
                        coef_p[j, elk, col] += pj
                        coef_p[k, elj, col] += pk
                        for d3 in range(3):
                            ang_q[j, elk, col, d3] += qj * unit[k, d3]
                            ang_q[k, elj, col, d3] += qk * unit[j, d3]
    if derivatives:  # ang_q becomes the full ∂G/∂r_ij: add the P·r̂_ij part
        for p in range(coef_p.shape[0]):
            for s in range(coef_p.shape[1]):
                for col in range(k_a):
                    cp = coef_p[p, s, col]
                    if cp != 0.0:
                        for d3 in range(3):
                            ang_q[p, s, col, d3] += cp * unit[p, d3]


def _angular_values(
    unit, r, seg, nbr_el, a_p, n_narrow, e_eta, e_rs, e_rc, e_kind, e_alpha,
    z_zeta, z_lam, z_int, ecol, zcol, pt_table, ang_acc,
):  # fmt: skip
    """Values-only specialisation of :func:`_angular_loop` (same arguments, no derivatives)."""
    n_e = seg.shape[0] - 1
    n_E = a_p.shape[1]
    n_Z = z_zeta.shape[0]
    k_a = ecol.shape[0]
    full = np.empty(n_E)
    zv = np.empty(n_Z)
    pre = np.empty(n_Z)
    for z in range(n_Z):
        pre[z] = 2.0 ** (1.0 - z_zeta[z])
    skip_rc2 = np.inf
    if n_narrow == n_E:
        skip_rc2 = 0.0
        for e in range(n_E):
            skip_rc2 = max(skip_rc2, e_rc[e] * e_rc[e])
    for i in range(n_e):
        s0 = seg[i]
        s1 = seg[i + 1]
        for j in range(s0, s1):
            rj = r[j]
            elj = nbr_el[j]
            ux, uy, uz = unit[j, 0], unit[j, 1], unit[j, 2]
            for k in range(j + 1, s1):
                rk = r[k]
                c = ux * unit[k, 0] + uy * unit[k, 1] + uz * unit[k, 2]
                rjk2 = rj * rj + rk * rk - 2.0 * rj * rk * c
                if rjk2 >= skip_rc2:
                    continue
                rjk = math.sqrt(max(rjk2, 0.0)) if n_narrow > 0 else 0.0
                fc = 0.0
                for e in range(n_E):
                    pr = a_p[j, e] * a_p[k, e]
                    if e < n_narrow:
                        if (
                            e == 0
                            or e_rc[e] != e_rc[e - 1]
                            or e_kind[e] != e_kind[e - 1]
                            or e_alpha[e] != e_alpha[e - 1]
                        ):
                            fc = _cutoff(rjk, e_rc[e], e_kind[e], e_alpha[e])[0]
                        d = rjk - e_rs[e]
                        pr *= math.exp(-e_eta[e] * d * d) * fc
                    full[e] = pr
                for z in range(n_Z):
                    base = 1.0 + z_lam[z] * c
                    if base <= 0.0:  # n2p2: no contribution where 1 + λ cos θ ≤ 0
                        zv[z] = 0.0
                        continue
                    if z_int[z] >= 1:
                        val = base
                        for _ in range(z_int[z] - 1):
                            val *= base
                    else:
                        val = base ** (z_zeta[z] - 1.0) * base
                    zv[z] = pre[z] * val
                p = pt_table[elj, nbr_el[k]]
                for col in range(k_a):
                    ang_acc[i, p, col] += full[ecol[col]] * zv[zcol[col]]


if _HAVE_NUMBA:  # pragma: no branch
    _cutoff = numba.njit(cache=True, inline="always")(_cutoff)
    _angular_loop_jit = numba.njit(cache=True, nogil=True)(_angular_loop)
    _angular_values_jit = numba.njit(cache=True, nogil=True)(_angular_values)


def angular_loop(*args) -> None:  # noqa: ANN002
    """Run the compiled triplet loop (arguments as :func:`_angular_loop`)."""
    if not _HAVE_NUMBA:
        raise BackendUnavailableError("backend='numba' needs numba (pip install numba)")
    derivatives = args[19]
    if derivatives:
        _angular_loop_jit(*args)
    else:  # drop da_p and the derivative outputs
        _angular_values_jit(*args[:5], *args[6:19])
