"""Angular (type 3 and 9) parts of the compiled ACSF kernel: the partner search into a
triplet buffer, the per-triplet terms of a buffer flush, the separable wide functions in
O(n), and the scatter of per-triplet derivative terms onto the neighbours."""

from __future__ import annotations

import math

import numpy as np

from dparallel.kernels._numba_jit import CONTRACT, _reduce_dot, jit_views
from dparallel.kernels._vecmath import like, vexp_like
from dparallel.kernels.acsf_radial_numba import _cutoff_fill

__all__: list[str] = []

_CAP = 512  # triplets per buffer flush: long vector loops, work arrays stay in L1/L2
# rows of the per-triplet scalar work array
_R, _IRJK, _C, _IJ, _IK, _CJ, _CK, _QQ, _PJ, _PK, _QV = range(11)
_N_WK = 11


def _partners(vx, vy, vz, rr, j0, j1, b0, b1, rc2, rmx, cap, dk2, jj, kk, d2, nq):  # noqa: ANN001, ANN202
    """Append to the triplet buffer (jj, kk, d2), from count nq, the partners of neighbours
    j = j0, j0 + 1, ... < j1: k in [max(j + 1, b0), b1) with r_jk² < rc2 and r_ij, r_ik < rmx,
    stopping before a j whose candidates might overflow the buffer (cap). Returns (that j,
    or j1 when all are done; the new count). Slices and unsigned counts inside: no
    negative-index fix-ups, contiguous vector loads; one call per centre and element pair."""
    for j in range(j0, j1):
        ju = np.uint64(j)
        if rr[ju] >= rmx:
            continue
        k0 = max(j + 1, b0)
        n = b1 - k0
        if n <= 0:
            continue
        if nq + n > cap:
            return j, nq
        xs = vx[k0:b1]
        ys = vy[k0:b1]
        zs = vz[k0:b1]
        rs = rr[k0:b1]
        xj = vx[ju]
        yj = vy[ju]
        zj = vz[ju]
        for t in range(n):  # r_jk² (vectorised), +inf where r_ik ≥ rmx
            dx = xs[t] - xj
            dy = ys[t] - yj
            dz = zs[t] - zj
            dd = dx * dx + dy * dy + dz * dz
            dk2[t] = dd if rs[t] < rmx else np.inf
        out_k = kk[nq:]
        out_d = d2[nq:]
        c = np.uint64(0)
        for t in range(n):  # keep r_jk² < rc² (no sqrt for the others)
            dd = dk2[t]
            out_k[c] = k0 + t
            out_d[c] = dd
            c += np.uint64(dd < rc2)
        m = np.int64(c)
        out_j = jj[nq : nq + m]
        for t in range(m):
            out_j[t] = j
        nq += m
    return j1, nq


def _angular_part(c, n, zeta, lam, zint, isint, z, zd, tmp, want_d):  # noqa: ANN001, ANN202
    """z[q] = (1 + λc)^ζ and zd[q] = ζλ(1 + λc)^(ζ-1), both 0 where 1 + λc ≤ 0 (n2p2)."""
    if isint == 1:
        m = zint - 1  # (1 + λc)^(ζ-1) by repeated multiplication, inverted if negative
        mm = m if m >= 0 else -m
        for q in range(n):
            b = 1.0 + lam * c[q]
            tmp[q] = b
            z[q] = 1.0
        for _ in range(mm):
            for q in range(n):
                z[q] *= tmp[q]
        zl = zeta * lam
        if m < 0:
            for q in range(n):
                z[q] = 1.0 / z[q]
        for q in range(n):
            b = tmp[q]
            pm1 = z[q]
            ok = b > 0.0
            z[q] = pm1 * b if ok else 0.0
            if want_d:
                zd[q] = zl * pm1 if ok else 0.0
        return
    zl = zeta * lam
    for q in range(n):  # non-integer ζ: pow (scalar libm call)
        b = 1.0 + lam * c[q]
        if b > 0.0:
            pm1 = math.pow(b, zeta - 1.0)
            z[q] = pm1 * b
            if want_d:
                zd[q] = zl * pm1
        else:
            z[q] = 0.0
            if want_d:
                zd[q] = 0.0


def _separable(
    plan, n, el, blk, vx, vy, vz, rr, inv_r, a_n, dar_n, mono, tsum, kvec, g_col, acc,
    derivatives,
):  # fmt: skip
    """Wide functions with (1 + λc)^ζ a polynomial: Σ_{j<k} from tensor powers, O(n·M).

    With c_jk^m = Σ_{|μ|=m} (m!/μ!) u_j^μ u_k^μ and T_a^μ = Σ_{j∈a} a(r_ij) u_j^μ:
    Σ_{j∈a,k∈b} a_j a_k (1 + λc)^ζ = Σ_μ C(ζ,|μ|) λ^|μ| (|μ|!/μ!) T_a^μ T_b^μ, and for a = b
    the sum over j < k is half of that minus the j = k terms. Derivatives: with
    S(j) = Σ_k a_k (1 + λ c_jk)^ζ and its gradient G(j) in u_j,
    ∂/∂r_ij = a'_j S u_j + a_j (I - u_j u_jᵀ) G / r_ij (docs/acsf.md).
    """
    n_mono = mono.shape[1]
    for m in range(n):  # monomials u^μ of each neighbour, by degree
        ir = inv_r[m]
        u0 = vx[m] * ir
        u1 = vy[m] * ir
        u2 = vz[m] * ir
        mono[m, 0] = 1.0
        for mu in range(1, n_mono):
            ax = plan.mono_axis[mu]
            uu = u0 if ax == 0 else (u1 if ax == 1 else u2)
            mono[m, mu] = mono[m, plan.mono_parent[mu]] * uu
    tsum[:] = 0.0
    for e in range(plan.e_sep.shape[0]):
        se = plan.e_sep[e]
        if se < 0:
            continue
        for m in range(n):
            am = a_n[e, m]
            if am == 0.0:
                continue
            t = tsum[el[m], se]
            for mu in range(n_mono):
                t[mu] += am * mono[m, mu]
    k_s = kvec[0]
    for p in range(plan.p_ab.shape[0]):
        a = plan.p_ab[p, 0]
        b = plan.p_ab[p, 1]
        c0 = plan.p_col_off[p]
        for sc in range(plan.p_scol_off[p], plan.p_scol_off[p + 1]):
            col = plan.p_scol[sc]
            e = plan.col_e[col]
            z = plan.col_z[col]
            se = plan.e_sep[e]
            zc = plan.z_sep[z]
            ta = tsum[a, se]
            tb = tsum[b, se]
            val = 0.0
            for mu in range(n_mono):
                val += zc[mu] * ta[mu] * tb[mu]
            if a == b:
                self_sum = 0.0
                for m in range(blk[a], blk[a + 1]):
                    self_sum += a_n[e, m] * a_n[e, m]
                val = 0.5 * (val - plan.z_sep_self[z] * self_sum)
            g_col[col] += val
            if not derivatives:
                continue
            for side in range(2 if a != b else 1):
                me = a if side == 0 else b
                partner = b if side == 0 else a
                tp = tsum[partner, se]
                for mu in range(n_mono):  # S(j) = k_s·u_j^μ, G_α(j) = k_α·u_j^μ
                    k_s[mu] = zc[mu] * tp[mu]
                for ax in range(3):
                    k_g = kvec[1 + ax]
                    for mu in range(n_mono):
                        nu = plan.mono_up[mu, ax]
                        k_g[mu] = (
                            0.0 if nu < 0 else (zc[nu] * tp[nu] * (plan.mono_power[mu, ax] + 1))
                        )
                slot = plan.s_off[me, partner] + col - c0
                for j in range(blk[me], blk[me + 1]):
                    aj = a_n[e, j]
                    daj = dar_n[e, j]
                    if aj == 0.0 and daj == 0.0:
                        continue
                    mj = mono[j]
                    sv = _reduce_dot(k_s, mj, n_mono)
                    if a == b:
                        sv -= plan.z_sep_self[z] * aj
                    gx = _reduce_dot(kvec[1], mj, n_mono)
                    gy = _reduce_dot(kvec[2], mj, n_mono)
                    gz = _reduce_dot(kvec[3], mj, n_mono)
                    ir = inv_r[j]
                    gv = (gx * vx[j] + gy * vy[j] + gz * vz[j]) * ir * ir * ir
                    acc[j, slot, 0] += daj * sv - aj * gv
                    acc[j, slot, 1] += aj * ir * gx
                    acc[j, slot, 2] += aj * ir * gy
                    acc[j, slot, 3] += aj * ir * gz


def _flush(
    plan, p, a, b, nq, jj, kk, d2, vx, vy, vz, inv_r, a_n, dar_n, g_col, acc, derivatives,
    wk, wk_e, wk_z, wk_c, wk_g, tstore, tj, tk, tseg, tcount,
):  # fmt: skip
    """Add the nq buffered triplets (j, k) of element pair p = (a, b) to values/derivatives
    (fused, ``tstore`` not empty: keep their per-column Pj, Pk, Q there instead)."""
    t_r = wk[_R]
    t_irjk = wk[_IRJK]
    t_c = wk[_C]
    t_ij = wk[_IJ]
    t_ik = wk[_IK]
    for q in range(nq):  # gather (scalar): cos θ_jik, 1/r_ij, 1/r_ik
        j = np.uint64(jj[q])  # unsigned: no negative-index fix-ups
        k = np.uint64(kk[q])
        t_ij[q] = inv_r[j]
        t_ik[q] = inv_r[k]
        t_c[q] = vx[j] * vx[k] + vy[j] * vy[k] + vz[j] * vz[k]
    for q in range(nq):  # vectorised from here on: contiguous work arrays
        rjk = math.sqrt(d2[q])
        t_r[q] = rjk
        t_irjk[q] = 1.0 / rjk
        t_c[q] *= t_ij[q] * t_ik[q]
    for pc in range(plan.p_c_off[p], plan.p_c_off[p + 1]):
        cc = plan.p_c_list[pc]
        _cutoff_fill(
            t_r, nq, plan.cut_rc[cc], plan.cut_kind[cc], plan.cut_alpha[cc],
            wk_c[cc, 0], wk_c[cc, 1], derivatives,
        )  # fmt: skip
    for pe in range(plan.p_e_off[p], plan.p_e_off[p + 1]):
        e = plan.p_e_list[pe]
        _radial_part(
            plan.ek_eta[e], plan.ek_rs[e], plan.ek_narrow[e] == 1, nq, jj, kk, t_r, t_irjk,
            wk_c[plan.ek_cut[e]], a_n[e], dar_n[e], wk_e[e], wk_g, derivatives,
        )  # fmt: skip
    for pz in range(plan.p_z_off[p], plan.p_z_off[p + 1]):
        z = plan.p_z_list[pz]
        _angular_part(
            t_c, nq, plan.zk_zeta[z], plan.zk_lam[z], plan.zk_int[z], plan.zk_isint[z],
            wk_z[z, 0], wk_z[z, 1], wk[_PJ], derivatives,
        )  # fmt: skip
    c0 = plan.p_col_off[plan.pt[a, b]]
    t0 = plan.p_tcol_off[p]
    t1 = plan.p_tcol_off[p + 1]
    for tc in range(t0, t1):
        col = plan.p_tcol[tc]
        g_col[col] += _reduce_dot(wk_e[plan.col_e[col], 0], wk_z[plan.col_z[col], 0], nq)
    if not derivatives:
        return
    t_cj = wk[_CJ]
    t_ck = wk[_CK]
    t_qq = wk[_QQ]
    for q in range(nq):
        ij = t_ij[q]
        ik = t_ik[q]
        t_cj[q] = t_c[q] * ij * ij
        t_ck[q] = t_c[q] * ik * ik
        t_qq[q] = ij * ik
    if tstore.shape[2]:
        base = tcount[1]
        sg = tcount[0]
        tseg[sg, 0] = p
        tseg[sg, 1] = base
        tseg[sg, 2] = nq
        tcount[0] = sg + 1
        tcount[1] = base + nq
        tj_out = tj[base:]  # a slice: no per-element index fix-up
        tk_out = tk[base:]
        for q in range(nq):
            tj_out[q] = jj[q]
            tk_out[q] = kk[q]
        for tc in range(t0, t1):
            col = plan.p_tcol[tc]
            t = tstore[col]
            _column_derivative(
                wk_e[plan.col_e[col]], wk_z[plan.col_z[col]], t_cj, t_ck, t_qq,
                t[0, base:], t[1, base:], t[2, base:], nq,
            )  # fmt: skip
        return
    sj0 = plan.s_off[a, b]
    sk0 = plan.s_off[b, a]
    for tc in range(t0, t1):
        col = plan.p_tcol[tc]
        _column_derivative(
            wk_e[plan.col_e[col]], wk_z[plan.col_z[col]], t_cj, t_ck, t_qq,
            wk[_PJ], wk[_PK], wk[_QV], nq,
        )  # fmt: skip
        _scatter(wk[_PJ], wk[_PK], wk[_QV], jj, kk, nq, vx, vy, vz,
                 acc[:, sj0 + col - c0], acc[:, sk0 + col - c0])  # fmt: skip


def _radial_part(
    eta, rs, narrow, nq, jj, kk, t_r, t_irjk, cut, a_e, dar_e, out, gat, derivatives
):  # fmt: skip
    """out[0] = W = a(r_ij) a(r_ik) b(r_jk); with derivatives out[1:4] = Xj, Xk, Y (docs)."""
    aj = gat[0]
    ak = gat[1]
    for q in range(nq):  # gather (scalar, unsigned indices), so that the loops below vectorise
        aj[q] = a_e[np.uint64(jj[q])]
        ak[q] = a_e[np.uint64(kk[q])]
    w = out[0]
    fc = cut[0]
    meta = like(-eta, t_r[0])  # compute precision (float32 or float64)
    rs = like(rs, t_r[0])
    if not derivatives:
        if narrow:
            for q in range(nq):  # rounded as below, so values are those with derivatives
                d = t_r[q] - rs
                w[q] = (aj[q] * ak[q]) * (vexp_like(meta * d * d) * fc[q])
        else:
            for q in range(nq):
                w[q] = aj[q] * ak[q]
        return
    daj = gat[2]
    dak = gat[3]
    for q in range(nq):
        daj[q] = dar_e[np.uint64(jj[q])]
        dak[q] = dar_e[np.uint64(kk[q])]
    xj = out[1]
    xk = out[2]
    y = out[3]
    dfc = cut[1]
    meta2 = like(2.0 * eta, t_r[0])
    if narrow:
        for q in range(nq):
            d = t_r[q] - rs
            g = vexp_like(meta * d * d)
            bb = g * fc[q]
            aa = aj[q] * ak[q]
            yy = aa * g * (dfc[q] - meta2 * d * fc[q]) * t_irjk[q]
            w[q] = aa * bb
            y[q] = yy
            xj[q] = daj[q] * ak[q] * bb + yy
            xk[q] = aj[q] * dak[q] * bb + yy
    else:
        for q in range(nq):
            w[q] = aj[q] * ak[q]
            y[q] = 0
            xj[q] = daj[q] * ak[q]
            xk[q] = aj[q] * dak[q]


def _column_derivative(we, wz, cj, ck, qq, pj, pk, qv, nq):  # noqa: ANN001, ANN202
    """Per triplet Pj, Pk, Q of one column (W, Xj, Xk, Y in we; Z, Z' in wz)."""
    w = we[0]
    xj = we[1]
    xk = we[2]
    y = we[3]
    z = wz[0]
    zd = wz[1]
    for q in range(nq):
        zz = z[q]
        zw = zd[q] * w[q]
        pj[q] = zz * xj[q] - zw * cj[q]
        pk[q] = zz * xk[q] - zw * ck[q]
        qv[q] = zw * qq[q] - zz * y[q]


def _scatter(pj, pk, qv, jj, kk, nq, vx, vy, vz, out_j, out_k):  # noqa: ANN001, ANN202
    """Triplets q < nq (j-major): ∂/∂r_ij += Pj r_ij + Q r_ik into out_j[j] and
    ∂/∂r_ik += Pk r_ik + Q r_ij into out_k[k], as (P, V) rows; the j side summed per run
    of equal j in registers (no store-to-load chain through memory)."""
    q = np.uint64(0)  # unsigned indices: no negative-index fix-ups
    end = np.uint64(nq)
    while q < end:
        j = jj[q]
        ju = np.uint64(j)
        xj = vx[ju]
        yj = vy[ju]
        zj = vz[ju]
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        while q < end and jj[q] == j:
            k = np.uint64(kk[q])
            qq = qv[q]
            s0 += pj[q]
            s1 += qq * vx[k]
            s2 += qq * vy[k]
            s3 += qq * vz[k]
            out_k[k, 0] += pk[q]
            out_k[k, 1] += qq * xj
            out_k[k, 2] += qq * yj
            out_k[k, 3] += qq * zj
            q += np.uint64(1)
        out_j[ju, 0] += s0
        out_j[ju, 1] += s1
        out_j[ju, 2] += s2
        out_j[ju, 3] += s3


_angular_part = jit_views(CONTRACT)(_angular_part)
_radial_part = jit_views(CONTRACT)(_radial_part)
_column_derivative = jit_views(CONTRACT)(_column_derivative)
_flush = jit_views(CONTRACT)(_flush)
_separable = jit_views(CONTRACT)(_separable)
_scatter = jit_views(CONTRACT)(_scatter)
_partners = jit_views(CONTRACT)(_partners)
