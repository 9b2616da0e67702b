"""Compiled (numba) ACSF kernel for one central element: the fast CPU path.

Same mathematics and n2p2 semantics as the torch reference
(:mod:`dparallel.descriptors._acsf_torch`); how it gets there (neighbours sorted by element,
per-neighbour caches, triplet buffers, the O(n) separable wide functions) is in
docs/acsf.md, "The compiled kernel". This module is the driver; its parts are in
:mod:`~dparallel.kernels.acsf_radial_numba`, :mod:`~dparallel.kernels.acsf_angular_numba`,
:mod:`~dparallel.kernels.mlp_numba`, :mod:`~dparallel.kernels.acsf_force_numba`, and its
argument types in :mod:`~dparallel.kernels.acsf_layout` (re-exported here).
"""

from __future__ import annotations

import numpy as np

from dparallel.kernels._numba_jit import CONTRACT, jit, jit_views
from dparallel.kernels._vecmath import vexp
from dparallel.kernels.acsf_angular_numba import (
    _CAP,
    _N_WK,
    _flush,
    _partners,
    _separable,
)
from dparallel.kernels.acsf_force_numba import _contract, _triplet_forces
from dparallel.kernels.acsf_layout import (
    KernelPlan,
    NetworkForces,
    SplitLayout,
    no_network,
    no_split,
    radial_columns,
    split_layout,
)
from dparallel.kernels.acsf_radial_numba import _cutoff_fill, _radial
from dparallel.kernels.mlp_numba import _network

__all__ = [  # the argument types and their builders are re-exported from acsf_layout
    "KernelPlan",
    "NetworkForces",
    "SplitLayout",
    "acsf_element",
    "no_network",
    "no_split",
    "radial_columns",
    "split_layout",
]


def _acsf_element(
    plan,  # KernelPlan
    vec,  # (P, 3) float64 r_ij, pairs sorted by centre
    dist,  # (P,) float64
    seg,  # (n_e + 1,) int64 pair range of each centre
    nbr_el,  # (P,) int64 neighbour element
    grp_row,  # (P,) int64 row of the pair in its neighbour element's derivative block
    d_base,  # (n_el,) int64 offset of neighbour element f's block in dflat
    values,  # (n_e, F) out
    dflat,  # (Σ_f P_f·F_f·3,) out: per f a (P_f, F_f, 3) block (see split)
    derivatives,  # bool
    work_dtype,  # (0,) array: its dtype is the precision of the triplet terms (f32/f64)
    net,  # NetworkForces: with net.on (needs derivatives, float64) energies/forces, not dflat
    split,  # SplitLayout: with split.on dflat blocks are (radial (F_r, P_f), other (F_a, 3, P_f))
):
    n_e = seg.shape[0] - 1
    n_el = plan.pt.shape[0]
    n_cut = plan.cut_rc.shape[0]
    n_ek = plan.ek_eta.shape[0]
    n_zk = plan.zk_zeta.shape[0]
    n_col = plan.col_e.shape[0]
    n_pt = plan.p_ab.shape[0]
    k_r = plan.rk_eta.shape[0]
    n_slot = 0
    for f in range(n_el):
        for g in range(n_el):
            p = plan.pt[f, g]
            n_slot = max(n_slot, plan.s_off[f, g] + plan.p_col_off[p + 1] - plan.p_col_off[p])
    n_max = 0
    for i in range(n_e):
        n_max = max(n_max, seg[i + 1] - seg[i])
    # per-centre neighbour data, sorted by element
    vx = np.empty(n_max)
    vy = np.empty(n_max)
    vz = np.empty(n_max)
    rr = np.empty(n_max)
    inv_r = np.empty(n_max)
    el = np.empty(n_max, dtype=np.int64)
    orig = np.empty(n_max, dtype=np.int64)
    blk = np.zeros(n_el + 1, dtype=np.int64)
    fill = np.zeros(n_el, dtype=np.int64)
    fcn = np.empty((n_cut, n_max))
    dfcn = np.empty((n_cut, n_max))
    a_n = np.empty((n_ek, n_max))  # a(r_ij) per angular radial part
    dar_n = np.empty((n_ek, n_max))  # a'(r_ij)/r_ij
    d_rad = np.empty((k_r, n_max))  # radial a'(r_ij) (derivatives)
    g_rad = np.empty(k_r)
    g_tmp = np.empty(n_max)  # exp(-η(r_ij - rs)²) of one radial function
    g_col = np.empty(n_col)
    # triplet buffer (j, k, r_jk²) and work arrays over its entries q
    cap = max(_CAP, n_max)
    jj = np.empty(cap, dtype=np.int64)
    kk = np.empty(cap, dtype=np.int64)
    d2 = np.empty(cap, dtype=work_dtype.dtype)
    dk2 = np.empty(n_max)  # r_jk² of one j and its candidate partners k
    wk = np.empty((_N_WK, cap), dtype=work_dtype.dtype)  # per-triplet scalars
    n_ew = 4 if derivatives else 1
    wk_e = np.empty((n_ek, n_ew, cap), dtype=work_dtype.dtype)  # per radial part: W (and Xj, Xk, Y)
    wk_z = np.empty((n_zk, 2, cap), dtype=work_dtype.dtype)  # per angular part: Z, Z'
    wk_c = np.empty((n_cut, 2, cap), dtype=work_dtype.dtype)  # per cutoff: f_c(r_jk), f_c'(r_jk)
    wk_g = np.empty(
        (4, cap), dtype=work_dtype.dtype
    )  # gathered a(r_ij), a(r_ik), a'(r_ij)/r_ij, a'(r_ik)/r_ik
    n_acc = n_max if derivatives else 0
    acc = np.empty((n_acc, n_slot, 4))
    n_sep_e = 0
    for e in range(n_ek):
        n_sep_e += plan.e_sep[e] >= 0
    n_mono = plan.mono_parent.shape[0]
    mono = np.empty((n_max if n_sep_e else 0, n_mono))  # u^μ of each neighbour
    tsum = np.empty((n_el, n_sep_e, n_mono))  # T^μ = Σ_j a(r_ij) u_j^μ per element
    kvec = np.empty((4, n_mono))  # per neighbour and slot: P, V (∂G/∂r_ij = P r_ij + V)
    n_h = net.width if net.on else 0
    r_keep = net.r_max if net.on else np.inf
    acts = np.empty((net.layers.shape[0] + 1, n_h))
    gbuf = np.empty((2, n_h))
    w_e = np.empty(values.shape[1] if net.on else 0)  # ∂E/∂G of the centre
    # fused: every triplet of a centre keeps its per-column Pj, Pk, Q until ∂E/∂G is known
    n_t = max(1, n_max * (n_max - 1) // 2) if net.on else 0
    tstore = np.empty((n_col, 3, n_t), dtype=work_dtype.dtype)
    tj = np.empty(n_t, dtype=np.int64)
    tk = np.empty(n_t, dtype=np.int64)
    tseg = np.empty((n_t + 2 * n_pt + 1 if net.on else 0, 3), dtype=np.int64)  # p, start, n
    tcount = np.zeros(2, dtype=np.int64)  # segments, triplets stored
    wcol = np.empty(n_col)  # ∂E/∂G of each column (its scale included)
    facc = np.empty((n_max if net.on else 0, 4))  # per neighbour P, V of the triplet columns
    wrad = np.empty(k_r)  # ∂E/∂G summed per radial key / accumulator slot
    wslot = np.empty((n_el, n_slot))
    prad = np.empty(n_max)  # Σ_k w_k a'_k(r_ij) per neighbour
    vloc = np.empty((3, 3))
    for i in range(n_e):
        s0 = seg[i]
        n_all = seg[i + 1] - s0
        # ------------------- sort neighbours by element (fused: those inside r_max only)
        blk[:] = 0
        for m in range(n_all):
            if dist[s0 + m] < r_keep:
                blk[nbr_el[s0 + m] + 1] += 1
        for f in range(n_el):
            blk[f + 1] += blk[f]
            fill[f] = blk[f]
        n = blk[n_el]
        for m in range(n_all):
            if dist[s0 + m] >= r_keep:
                continue
            f = nbr_el[s0 + m]
            t = fill[f]
            fill[f] += 1
            orig[t] = s0 + m
            el[t] = f
        for t in range(n):
            o = orig[t]
            vx[t] = vec[o, 0]
            vy[t] = vec[o, 1]
            vz[t] = vec[o, 2]
            rr[t] = dist[o]
            inv_r[t] = 1.0 / dist[o]
        # ------------------------------------------------- per-neighbour caches
        for cc in range(n_cut):
            _cutoff_fill(
                rr, n, plan.cut_rc[cc], plan.cut_kind[cc], plan.cut_alpha[cc],
                fcn[cc], dfcn[cc], True,
            )  # fmt: skip
        for e in range(n_ek):
            eta = plan.ek_eta[e]
            rs = plan.ek_rs[e]
            fc = fcn[plan.ek_cut[e]]
            dfc = dfcn[plan.ek_cut[e]]
            ae = a_n[e]
            de = dar_n[e]
            for m in range(n):
                d = rr[m] - rs
                g = vexp(-eta * d * d)
                ae[m] = g * fc[m]
                de[m] = g * (dfc[m] - 2.0 * eta * d * fc[m]) * inv_r[m]
        # --------------------------------------------------------------- radial
        _radial(plan, blk, rr, fcn, dfcn, g_tmp, d_rad, g_rad, derivatives)
        # -------------------------------------------------------------- angular
        g_col[:] = 0.0
        if derivatives:
            acc[:n] = 0.0
        tcount[:] = 0
        mode = 1 if n_sep_e and n >= plan.sep_min_neighbors else 0
        for a in range(n_el):
            for b in range(a, n_el):
                p = plan.pt[a, b] + mode * n_pt
                if plan.p_tcol_off[p] == plan.p_tcol_off[p + 1]:
                    continue
                rc2 = plan.p_rc2[p]
                rmx = plan.p_rmax[p]
                j = blk[a]
                while True:  # flushed whenever the next j might overflow it, and at the end
                    j, nq = _partners(
                        vx, vy, vz, rr, j, blk[a + 1], blk[b], blk[b + 1], rc2, rmx, cap,
                        dk2, jj, kk, d2, 0,
                    )  # fmt: skip
                    if nq:
                        _flush(
                            plan, p, a, b, nq, jj, kk, d2, vx, vy, vz, inv_r, a_n, dar_n,
                            g_col, acc, derivatives, wk, wk_e, wk_z, wk_c, wk_g,
                            tstore, tj, tk, tseg, tcount,
                        )  # fmt: skip
                    if j == blk[a + 1]:
                        break
        # ------------------------------------- separable wide functions, O(n)
        if mode == 1:
            _separable(plan, n, el, blk, vx, vy, vz, rr, inv_r, a_n, dar_n, mono, tsum, kvec,
                       g_col, acc, derivatives)  # fmt: skip
        # -------------------------------------------------------------- outputs
        for d in range(values.shape[1]):
            s = plan.vsrc[d]
            values[i, d] = g_rad[s] if s < k_r else g_col[s - k_r] * plan.col_scale[s - k_r]
        if not derivatives:
            continue
        if net.on:
            net.energies[i] = _network(net, values[i], acts, gbuf[0], gbuf[1], w_e)
            _triplet_forces(
                plan, w_e, k_r, n, wcol, tstore, tj, tk, tseg, tcount[0], vx, vy, vz, facc, wk,
            )  # fmt: skip
            _contract(
                plan, net, w_e, n, el, blk, orig, vx, vy, vz, inv_r, d_rad, acc, facc, k_r,
                mode == 1, wrad, wslot, prad, vloc,
            )  # fmt: skip
            continue
        if split.on:
            _write_split(plan, split, n, el, orig, grp_row, d_base, d_rad, acc, vx, vy, vz, k_r,
                         dflat)  # fmt: skip
            continue
        for m in range(n):
            f = el[m]
            o = orig[m]
            f0 = plan.dsrc_off[f]
            width = plan.dsrc_off[f + 1] - f0
            base = d_base[f] + grp_row[o] * width * 3
            ir = inv_r[m]
            for dcol in range(width):
                s = plan.dsrc[f0 + dcol]
                sc = plan.dscale[f0 + dcol]
                at = base + 3 * dcol
                if s < k_r:
                    pr = d_rad[s, m] * ir * sc
                    dflat[at] = pr * vx[m]
                    dflat[at + 1] = pr * vy[m]
                    dflat[at + 2] = pr * vz[m]
                else:
                    sl = s - k_r
                    pr = acc[m, sl, 0]
                    dflat[at] = (pr * vx[m] + acc[m, sl, 1]) * sc
                    dflat[at + 1] = (pr * vy[m] + acc[m, sl, 2]) * sc
                    dflat[at + 2] = (pr * vz[m] + acc[m, sl, 3]) * sc


def _write_split(plan, split, n, el, orig, grp_row, d_base, d_rad, acc, vx, vy, vz, k_r,
                 dflat):  # fmt: skip  # noqa: ANN001, ANN202
    """One centre's dG/dr into the :class:`SplitLayout` blocks: per neighbour m the radial
    columns as s = a'(r_ij)·scale (∂G/∂r_ij = s r̂_ij), the others as 3-vectors, each column
    a run over the block's pairs (row ``grp_row``)."""
    for m in range(n):
        f = el[m]
        row = grp_row[orig[m]]
        n_p = split.n_pairs[f]
        base_r = d_base[f] + row
        base_a = d_base[f] + split.n_radial[f] * n_p + row
        for dc in range(plan.dsrc_off[f], plan.dsrc_off[f + 1]):
            s = plan.dsrc[dc]
            sc = plan.dscale[dc]
            k = split.column[dc]
            if s < k_r:
                dflat[np.uint64(base_r + k * n_p)] = d_rad[s, m] * sc
            else:
                sl = s - k_r
                pr = acc[m, sl, 0]
                at = base_a + 3 * k * n_p  # unsigned below: no negative-index fix-ups
                dflat[np.uint64(at)] = (pr * vx[m] + acc[m, sl, 1]) * sc
                dflat[np.uint64(at + n_p)] = (pr * vy[m] + acc[m, sl, 2]) * sc
                dflat[np.uint64(at + 2 * n_p)] = (pr * vz[m] + acc[m, sl, 3]) * sc


_write_split = jit_views(CONTRACT)(_write_split)
_acsf_element_jit = jit(CONTRACT, nogil=True)(_acsf_element)

acsf_element = _acsf_element_jit  # the compiled kernel (arguments as _acsf_element)
