"""Triton ACSF kernel for one central element: values and dG/dr in the store's split layout.

Same semantics as the compiled kernel (:mod:`dparallel.kernels.acsf_numba`), driven by the
same :class:`~dparallel.kernels.acsf_layout.KernelPlan`; layout, the four kernels, groups
and tiles: docs/kernels.md, "The Triton ACSF kernel". Computed in float64, outputs cast
once. Runs on a CUDA device, or on CPU tensors under ``TRITON_INTERPRET=1`` (set before
triton is imported).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
import triton
import triton.language as tl

from dparallel.kernels._backends.triton_acsf_tables import (
    kernel_tables,
    neighbor_tables,
    rank_within_value,
)
from dparallel.kernels._backends.triton_env import interpreting

if TYPE_CHECKING:
    from dparallel.kernels.acsf_layout import KernelPlan

__all__ = ["BLOCKS", "TritonACSF", "interpreting", "triton_acsf_element"]

#: Centres per chunk of the padded neighbour tables (bounds their memory), at most.
CHUNK_CENTERS = 16384
#: Bytes of the neighbour and factor tables of one chunk, at most (fewer centres per chunk
#: where centres have many neighbours or the plan many radial parts).
CHUNK_BYTES = 2**31

#: Tile on a GPU: (BLOCK_C centres, BLOCK_J neighbours j, BLOCK_K partners k, warps), the
#: same for the three kernels; chosen without register spills on sm_90 (docs/kernels.md).
#: A module attribute read at each call, so a benchmark may set it
#: (``benchmarks/bench_node.py --triton-blocks``).
BLOCKS: tuple[int, int, int, int] = (32, 1, 4, 1)


class TritonACSF(NamedTuple):
    """Result of :func:`triton_acsf_element` (tensors on the input's device): ``dflat``
    holds neighbour element f's block (n_rows[f], P_f) at ``d_base[f]``, laid out as the
    compiled kernel's :class:`~dparallel.kernels.acsf_layout.SplitLayout`."""

    values: torch.Tensor  # (n_c, F)
    dflat: torch.Tensor | None
    d_base: np.ndarray  # (n_el,) int64
    n_rows: np.ndarray  # (n_el,) int64: rows of each block (0: no derivative columns)
    selections: dict[int, torch.Tensor]  # f → (P_f,) pair indices of the block


# --------------------------------------------------------------------------- device code
# Device helpers are plain functions under the interpreter (the kernel's patched triton
# language is already in force when they run; jitting them there re-patches it per call).
_helper = (lambda fn: fn) if interpreting() else triton.jit


@_helper
def _tanh_pos(y):
    """tanh(y) for y ≥ 0 (exp form; no tanh in triton.language)."""
    e = tl.exp(-2.0 * y)
    return (1.0 - e) / (1.0 + e)


@_helper
def _cutoff(r, rc, kind, alpha, KINDS: tl.constexpr):
    """f_c(r), f_c'(r) (n2p2 type ``kind``; 0 for r ≥ rc); KINDS: bitmask of kinds used."""
    rci = alpha * rc
    iw = 1.0 / (rc - rci)
    x = (r - rci) * iw
    x = tl.where(x < 0.0, 0.0, tl.where(x > 1.0, 1.0, x))  # (no jitted min/max: interpreter)
    f = tl.full(r.shape, 1.0, tl.float64)
    df = tl.zeros(r.shape, tl.float64)
    if KINDS & 2:
        px = 3.141592653589793 * x
        f = tl.where(kind == 1, 0.5 * (tl.cos(px) + 1.0), f)
        df = tl.where(kind == 1, -0.5 * 3.141592653589793 * iw * tl.sin(px), df)
    if KINDS & 12:
        t = _tanh_pos(tl.where(r < rc, 1.0 - r / rc, 0.0))
        t3 = t * t * t
        dt3 = -3.0 * t * t * (1.0 - t * t) / rc
        # (a where between two literals would make a float32 constant: scale the tensors)
        f = tl.where(kind == 2, t3, tl.where(kind == 3, t3 * 2.2637537952253513, f))  # / tanh(1)³
        df = tl.where(kind == 2, dt3, tl.where(kind == 3, dt3 * 2.2637537952253513, df))
    if KINDS & 16:
        om = tl.where(x * x < 1.0, 1.0 - x * x, 1.0)  # x = 1 is r ≥ rc: masked below
        v = tl.exp(1.0 - 1.0 / om)
        f = tl.where(kind == 4, v, f)
        df = tl.where(kind == 4, -2.0 * x * v / (om * om) * iw, df)
    if KINDS & 32:
        f = tl.where(kind == 5, (2.0 * x - 3.0) * x * x + 1.0, f)
        df = tl.where(kind == 5, (6.0 * x - 6.0) * x * iw, df)
    if KINDS & 64:
        x2 = x * x
        f = tl.where(kind == 6, ((15.0 - 6.0 * x) * x - 10.0) * x2 * x + 1.0, f)
        df = tl.where(kind == 6, x2 * ((60.0 - 30.0 * x) * x - 30.0) * iw, df)
    if KINDS & 128:
        x3 = x * x * x
        f = tl.where(kind == 7, (x * (x * (20.0 * x - 70.0) + 84.0) - 35.0) * x3 * x + 1.0, f)
        df = tl.where(kind == 7, x3 * (x * (x * (140.0 * x - 420.0) + 420.0) - 140.0) * iw, df)
    if KINDS & 256:
        x4 = x * x * x * x
        v8 = (x * (x * ((315.0 - 70.0 * x) * x - 540.0) + 420.0) - 126.0) * x4 * x + 1.0
        d8 = x4 * (x * (x * ((2520.0 - 630.0 * x) * x - 3780.0) + 2520.0) - 630.0) * iw
        f = tl.where(kind == 8, v8, f)
        df = tl.where(kind == 8, d8, df)
    inside = r < rc
    return tl.where(inside, f, 0.0), tl.where(inside, df, 0.0)


@_helper
def _gauss(r, eta, rs, rc, kind, alpha, KINDS: tl.constexpr):
    """a(r) = exp(−η(r − rs)²) f_c(r) and a'(r)."""
    fc, dfc = _cutoff(r, rc, kind, alpha, KINDS)
    d = r - rs
    g = tl.exp(-eta * d * d)
    return g * fc, g * (dfc - 2.0 * eta * d * fc)


@_helper
def _angular(c, zeta, lam, zint, isint):
    """(1 + λc)^ζ and ζλ(1 + λc)^(ζ−1), both 0 where 1 + λc ≤ 0 (n2p2)."""
    b = 1.0 + lam * c
    ok = b > 0.0
    if isint == 1:
        m = zint - 1
        mm = tl.abs(m)
        p = tl.full(c.shape, 1.0, tl.float64)
        for _ in range(mm):
            p = p * b
        if m < 0:
            p = 1.0 / p
    else:
        p = tl.exp((zeta - 1.0) * tl.log(tl.where(ok, b, 1.0)))
    return tl.where(ok, p * b, 0.0), tl.where(ok, zeta * lam * p, 0.0)


@_helper
def _load_cut(CUT_RC, CUT_KIND, CUT_ALPHA, cut):
    """Cutoff ``cut``'s radius, n2p2 type and inner fraction α."""
    return tl.load(CUT_RC + cut), tl.load(CUT_KIND + cut), tl.load(CUT_ALPHA + cut)


@_helper
def _load_gauss(ETA, RS, CUT, CUT_RC, CUT_KIND, CUT_ALPHA, i):
    """Entry ``i`` of a table of Gaussians: η, rs, and its cutoff's rc, type, α."""
    rc, kind, alpha = _load_cut(CUT_RC, CUT_KIND, CUT_ALPHA, tl.load(CUT + i))
    return tl.load(ETA + i), tl.load(RS + i), rc, kind, alpha


@_helper
def _load_radial(COL_ETA, COL_RS, COL_CUT, COL_NARROW, CUT_RC, CUT_KIND, CUT_ALPHA, col):
    """Angular column ``col``'s radial part: η, rs, narrow, and its cutoff's rc, type, α."""
    eta, rs, rc, kind, alpha = _load_gauss(
        COL_ETA, COL_RS, COL_CUT, CUT_RC, CUT_KIND, CUT_ALPHA, col
    )
    return eta, rs, tl.load(COL_NARROW + col), rc, kind, alpha


@_helper
def _load_group(
    G_A, G_B, G_E, G_LO, G_N, G_COL,
    COL_ETA, COL_RS, COL_CUT, COL_NARROW, CUT_RC, CUT_KIND, CUT_ALPHA,
):  # fmt: skip
    """This program's group (the grid's 2nd axis): its two elements, radial part, first
    column and member count, and that radial part's η, rs, narrow, rc, type, α."""
    grp = tl.program_id(1)
    lo = tl.load(G_LO + grp)
    eta, rs, narrow, rc, kind, alpha = _load_radial(
        COL_ETA, COL_RS, COL_CUT, COL_NARROW, CUT_RC, CUT_KIND, CUT_ALPHA, tl.load(G_COL + lo)
    )
    return (
        tl.load(G_A + grp), tl.load(G_B + grp), tl.load(G_E + grp), lo, tl.load(G_N + grp),
        eta, rs, narrow, rc, kind, alpha,
    )  # fmt: skip


@_helper
def _load_angular(COL_ZETA, COL_LAM, COL_ZINT, COL_ISINT, col):
    """Angular column ``col``'s ζ, λ, integer ζ and whether ζ is an integer."""
    zeta, lam = tl.load(COL_ZETA + col), tl.load(COL_LAM + col)
    return zeta, lam, tl.load(COL_ZINT + col), tl.load(COL_ISINT + col)


@_helper
def _counts(CNT, e, n_c, cs, cm):
    """Neighbours of element ``e`` of centres ``cs`` (0 where masked off), and as (C, 1, 1)."""
    cnt = tl.load(CNT + e * n_c + cs, mask=cm, other=0)
    return cnt, cnt[:, None, None]


@_helper
def _load3(X, Y, Z, off, mask):
    """A 3-vector per neighbour at table offsets ``off`` (padding: (1, 0, 0))."""
    x = tl.load(X + off, mask=mask, other=1.0)
    y = tl.load(Y + off, mask=mask, other=0.0)
    z = tl.load(Z + off, mask=mask, other=0.0)
    return x, y, z


@triton.jit
def _radial_kernel(
    R, PIDX, CNT, GROW, n_c, M,
    RK_F, RK_ETA, RK_RS, RK_CUT, n_rk,
    CUT_RC, CUT_KIND, CUT_ALPHA,
    RAD_OUT,
    RD_F, RD_KEY, RD_COL, n_rd, DBASE, NPAIRS, DOUT,
    BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, KINDS: tl.constexpr, DERIV: tl.constexpr,
):  # fmt: skip  # noqa: ANN001, ANN202
    """Radial sums (n_c, K_r) and s of every radial derivative column."""
    cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = cs < n_c
    c2 = cs[:, None]
    for kr in range(n_rk):
        f = tl.load(RK_F + kr)
        eta, rs, rc, kind, alpha = _load_gauss(
            RK_ETA, RK_RS, RK_CUT, CUT_RC, CUT_KIND, CUT_ALPHA, kr
        )
        cnt = tl.load(CNT + f * n_c + cs, mask=cm, other=0)
        acc = tl.zeros([BLOCK_C, BLOCK_K], tl.float64)
        for j0 in range(0, tl.max(cnt, 0), BLOCK_K):
            js = j0 + tl.arange(0, BLOCK_K)[None, :]
            mj = js < cnt[:, None]
            r = tl.load(R + (f * M + js) * n_c + c2, mask=mj, other=1.0)
            a = _gauss(r, eta, rs, rc, kind, alpha, KINDS)[0]
            acc += tl.where(mj, a, 0.0)
        tl.store(RAD_OUT + cs * n_rk + kr, tl.sum(acc, 1), mask=cm)
    if DERIV:
        for d in range(n_rd):
            f = tl.load(RD_F + d)
            key = tl.load(RD_KEY + d)
            col = tl.load(RD_COL + d)
            eta, rs, rc, kind, alpha = _load_gauss(
                RK_ETA, RK_RS, RK_CUT, CUT_RC, CUT_KIND, CUT_ALPHA, key
            )
            base = tl.load(DBASE + f)
            n_p = tl.load(NPAIRS + f)
            cnt = tl.load(CNT + f * n_c + cs, mask=cm, other=0)
            for j0 in range(0, tl.max(cnt, 0), BLOCK_K):
                js = j0 + tl.arange(0, BLOCK_K)[None, :]
                mj = js < cnt[:, None]
                off = (f * M + js) * n_c + c2
                r = tl.load(R + off, mask=mj, other=1.0)
                p = tl.load(PIDX + off, mask=mj, other=0)
                row = tl.load(GROW + p, mask=mj, other=0)
                da = _gauss(r, eta, rs, rc, kind, alpha, KINDS)[1]
                tl.store(DOUT + base + col * n_p + row, da, mask=mj)


@triton.jit
def _factor_kernel(
    R, CNT, n_c, M, n_el,
    EK_ETA, EK_RS, EK_CUT, n_e,
    CUT_RC, CUT_KIND, CUT_ALPHA,
    A, DA,
    BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, KINDS: tl.constexpr, DERIV: tl.constexpr,
):  # fmt: skip  # noqa: ANN001, ANN202
    """Radial factors a(r) and a'(r) of every angular radial part e and neighbour:
    (E, n_el, M, n_c) tables, so that the triplet kernels only load them."""
    cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = cs < n_c
    c2 = cs[:, None]
    for e in range(n_e):
        eta, rs, rc, kind, alpha = _load_gauss(
            EK_ETA, EK_RS, EK_CUT, CUT_RC, CUT_KIND, CUT_ALPHA, e
        )
        for f in range(n_el):
            cnt = tl.load(CNT + f * n_c + cs, mask=cm, other=0)
            for j0 in range(0, tl.max(cnt, 0), BLOCK_K):
                js = j0 + tl.arange(0, BLOCK_K)[None, :]
                mj = js < cnt[:, None]
                r = tl.load(R + (f * M + js) * n_c + c2, mask=mj, other=1.0)
                a, da = _gauss(r, eta, rs, rc, kind, alpha, KINDS)
                at = ((e * n_el + f) * M + js) * n_c + c2
                tl.store(A + at, a, mask=mj)
                if DERIV:
                    tl.store(DA + at, da, mask=mj)


@triton.jit
def _angular_values_kernel(
    X, Y, Z, UX, UY, UZ, A, CNT, n_c, M, n_el,
    GV_A, GV_B, GV_E, GV_LO, GV_N, GV_COL,
    COL_ETA, COL_RS, COL_CUT, COL_NARROW, COL_ZETA, COL_LAM, COL_ZINT, COL_ISINT,
    COL_SCALE, n_col,
    CUT_RC, CUT_KIND, CUT_ALPHA,
    ANG_OUT,
    BLOCK_C: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_Z: tl.constexpr, KINDS: tl.constexpr,
):  # fmt: skip  # noqa: ANN001, ANN202
    """Angular sums (n_c, K): per column Σ_{j<k} 2^(1−ζ) Z(cos θ) a(r_ij) a(r_ik) [b(r_jk)].

    Per group (element pair, radial part e; ≤ BLOCK_Z columns differing in ζ, λ), tiles of
    BLOCK_C centres × BLOCK_J neighbours j × BLOCK_K partners k: a(r) loaded from the
    factor tables, cos θ and b(r_jk) once per tile, then each column's angular factor.
    """
    cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = cs < n_c
    c3 = cs[:, None, None]
    z3 = tl.arange(0, BLOCK_Z)[None, None, :]
    zi = tl.arange(0, BLOCK_Z)[None, :]
    ea, eb, e, lo, nz, eta, rs, narrow, rc, kind, alpha = _load_group(
        GV_A, GV_B, GV_E, GV_LO, GV_N, GV_COL,
        COL_ETA, COL_RS, COL_CUT, COL_NARROW, CUT_RC, CUT_KIND, CUT_ALPHA,
    )  # fmt: skip
    cnt_a, ca3 = _counts(CNT, ea, n_c, cs, cm)
    cnt_b, cb3 = _counts(CNT, eb, n_c, cs, cm)
    same = (ea == eb).to(tl.int32)
    acc = tl.zeros([BLOCK_C, BLOCK_J, BLOCK_Z], tl.float64)  # per member, summed over k
    for j0 in range(0, tl.max(cnt_a, 0), BLOCK_J):
        js = j0 + tl.arange(0, BLOCK_J)[None, :, None]
        mj = js < ca3
        off_j = (ea * M + js) * n_c + c3
        xj, yj, zj = _load3(X, Y, Z, off_j, mj)
        ux, uy, uz = _load3(UX, UY, UZ, off_j, mj)
        aj = tl.load(A + (e * n_el * M) * n_c + off_j, mask=mj, other=0.0)
        k_first = (j0 + 1) * same  # same element pair: only k > j
        for k0 in range((k_first // BLOCK_K) * BLOCK_K, tl.max(cnt_b, 0), BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)[None, None, :]
            mk = mj & (ks < cb3) & (ks > js * same - (1 - same))
            off_k = (eb * M + ks) * n_c + c3
            vx, vy, vz = _load3(UX, UY, UZ, off_k, mk)
            ak = tl.load(A + (e * n_el * M) * n_c + off_k, mask=mk, other=0.0)
            c = ux * vx + uy * vy + uz * vz
            w = aj * ak
            if narrow == 1:
                xk, yk, zk = _load3(X, Y, Z, off_k, mk)
                dx, dy, dz = xk - xj, yk - yj, zk - zj
                rjk = tl.sqrt(dx * dx + dy * dy + dz * dz)
                w = w * _gauss(rjk, eta, rs, rc, kind, alpha, KINDS)[0]
            w = tl.where(mk, w, 0.0)
            for i in range(nz):
                zeta, lam, zint, isint = _load_angular(
                    COL_ZETA, COL_LAM, COL_ZINT, COL_ISINT, tl.load(GV_COL + lo + i)
                )
                t = _angular(c, zeta, lam, zint, isint)[0] * w
                acc = tl.where(z3 == i, acc + tl.sum(t, 2, keep_dims=True), acc)
    mz = zi < nz
    cols = tl.load(GV_COL + lo + zi, mask=mz, other=0)
    scale = tl.load(COL_SCALE + cols, mask=mz, other=0.0)
    total = tl.sum(acc, 1) * scale
    tl.store(ANG_OUT + cs[:, None] * n_col + cols, total, mask=cm[:, None] & mz)


@triton.jit
def _angular_derivs_kernel(
    X, Y, Z, UX, UY, UZ, R, A, DA, PIDX, CNT, GROW, n_c, M, n_el,
    GD_F, GD_G, GD_E, GD_LO, GD_N, GD_COL, GD_K,
    COL_ETA, COL_RS, COL_CUT, COL_NARROW, COL_ZETA, COL_LAM, COL_ZINT, COL_ISINT, COL_SCALE,
    CUT_RC, CUT_KIND, CUT_ALPHA,
    DBASE, NPAIRS, NRAD, DOUT, ANG_OUT, n_col,
    BLOCK_C: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_Z: tl.constexpr, KINDS: tl.constexpr, VALUES: tl.constexpr,
):  # fmt: skip  # noqa: ANN001, ANN202
    """Per slot (f, g, column) and neighbour j of element f: Σ_k ∂T_jk/∂r_ij → split block.

    Per group (f, g, radial part e; ≤ BLOCK_Z slots differing in ζ, λ), tiles of BLOCK_C
    centres × BLOCK_J neighbours j × BLOCK_K partners k, summed over k: a(r), a'(r) loaded
    from the factor tables, cos θ and b(r_jk) once per tile, then each slot's angular factor.
    With VALUES, the groups with f ≤ g also write their columns' values (n_c, K): Σ over
    j ≠ k of T_jk, halved for f = g (the values kernel is not run then).
    """
    cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = cs < n_c
    c3 = cs[:, None, None]
    z3 = tl.arange(0, BLOCK_Z)[None, None, :]
    ef, eg, e, lo, nz, eta, rs, narrow, rc, kind, alpha = _load_group(
        GD_F, GD_G, GD_E, GD_LO, GD_N, GD_COL,
        COL_ETA, COL_RS, COL_CUT, COL_NARROW, CUT_RC, CUT_KIND, CUT_ALPHA,
    )  # fmt: skip
    mz = z3 < nz
    cols = tl.load(GD_COL + lo + z3, mask=mz, other=0)
    scale = tl.load(COL_SCALE + cols, mask=mz, other=0.0)  # (1, 1, Z)
    n_p = tl.load(NPAIRS + ef)
    split = tl.load(NRAD + ef) + 3 * tl.load(GD_K + lo + z3, mask=mz, other=0)
    rows_at = tl.load(DBASE + ef) + split * n_p  # (1, 1, Z) first row of each slot
    cnt_f, cf3 = _counts(CNT, ef, n_c, cs, cm)
    cnt_g, cg3 = _counts(CNT, eg, n_c, cs, cm)
    vacc = tl.zeros([BLOCK_C, BLOCK_J, BLOCK_Z], tl.float64)  # values per member (VALUES)
    for j0 in range(0, tl.max(cnt_f, 0), BLOCK_J):
        js = j0 + tl.arange(0, BLOCK_J)[None, :, None]
        mj = js < cf3
        off_j = (ef * M + js) * n_c + c3
        xj, yj, zj = _load3(X, Y, Z, off_j, mj)
        ux, uy, uz = _load3(UX, UY, UZ, off_j, mj)
        rj = tl.load(R + off_j, mask=mj, other=1.0)
        aj = tl.load(A + (e * n_el * M) * n_c + off_j, mask=mj, other=0.0)
        daj = tl.load(DA + (e * n_el * M) * n_c + off_j, mask=mj, other=0.0)
        p = tl.load(PIDX + off_j, mask=mj, other=0)
        row = tl.load(GROW + p, mask=mj, other=0)
        aj_r = aj / rj
        j_self = tl.where(ef == eg, js, -1)  # k = j is no triplet
        gx = tl.zeros([BLOCK_C, BLOCK_J, BLOCK_Z], tl.float64)  # per member of the group
        gy = tl.zeros([BLOCK_C, BLOCK_J, BLOCK_Z], tl.float64)
        gz = tl.zeros([BLOCK_C, BLOCK_J, BLOCK_Z], tl.float64)
        for k0 in range(0, tl.max(cnt_g, 0), BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)[None, None, :]
            mk = mj & (ks < cg3) & (ks != j_self)
            off_k = (eg * M + ks) * n_c + c3
            vx, vy, vz = _load3(UX, UY, UZ, off_k, mk)
            ak = tl.load(A + (e * n_el * M) * n_c + off_k, mask=mk, other=0.0)
            c = ux * vx + uy * vy + uz * vz
            xk, yk, zk = _load3(X, Y, Z, off_k, mk)
            dx, dy, dz = xj - xk, yj - yk, zj - zk
            if narrow == 1:
                rjk = tl.sqrt(dx * dx + dy * dy + dz * dz)
                bjk, dbjk = _gauss(rjk, eta, rs, rc, kind, alpha, KINDS)
                wb = tl.where(mk, aj * ak * dbjk / rjk, 0.0)  # along r_ij − r_ik
                ak = ak * bjk
            else:
                wb = tl.zeros(c.shape, tl.float64)
            wu = tl.where(mk, aj_r * ak, 0.0)  # along û_k − c û_j
            wj = tl.where(mk, daj * ak, 0.0)  # along û_j
            for i in range(nz):
                zeta, lam, zint, isint = _load_angular(
                    COL_ZETA, COL_LAM, COL_ZINT, COL_ISINT, tl.load(GD_COL + lo + i)
                )
                zv, dzv = _angular(c, zeta, lam, zint, isint)
                cu = dzv * wu
                cj = zv * wj - cu * c
                cb = zv * wb
                sx = tl.sum(cj * ux + cu * vx + cb * dx, 2, keep_dims=True)
                sy = tl.sum(cj * uy + cu * vy + cb * dy, 2, keep_dims=True)
                sz = tl.sum(cj * uz + cu * vz + cb * dz, 2, keep_dims=True)
                gx = tl.where(z3 == i, gx + sx, gx)
                gy = tl.where(z3 == i, gy + sy, gy)
                gz = tl.where(z3 == i, gz + sz, gz)
                if VALUES:  # Σ_k T_jk = r_ij Σ_k Z(cos θ) w_u
                    sv = tl.sum(zv * wu, 2, keep_dims=True) * rj
                    vacc = tl.where(z3 == i, vacc + sv, vacc)
        at = rows_at + row  # (C, J, Z)
        m = mj & mz
        tl.store(DOUT + at, gx * scale, mask=m)
        tl.store(DOUT + at + n_p, gy * scale, mask=m)
        tl.store(DOUT + at + 2 * n_p, gz * scale, mask=m)
    if VALUES:
        zi = tl.arange(0, BLOCK_Z)[None, :]
        mv = zi < nz
        vcols = tl.load(GD_COL + lo + zi, mask=mv, other=0)
        vscale = tl.load(COL_SCALE + vcols, mask=mv, other=0.0)
        half = 1.0 - 0.5 * (ef == eg).to(tl.float64)  # each unordered pair j, k seen twice
        total = tl.sum(vacc, 1) * (vscale * half)
        mask = cm[:, None] & (zi < nz * (ef <= eg).to(tl.int64))  # groups with f > g: none
        tl.store(ANG_OUT + cs[:, None] * n_col + vcols, total, mask=mask)


# ----------------------------------------------------------------------------- host code
def _blocks(n_c: int, m: int) -> tuple[int, int, int, int]:
    """(centres, neighbours j, partners k, warps) per tile: :data:`BLOCKS` on a GPU, or when
    interpreted few large tiles (each interpreted operation has a fixed cost)."""
    if interpreting():  # (at most 2^20 elements per tile: the interpreter's limit)
        mm = triton.next_power_of_2(max(m, 1))
        bk = min(mm, 512)
        bj = min(mm, 2**16 // bk)
        return max(16, min(256, triton.next_power_of_2(n_c), 2**20 // (bj * bk))), bj, bk, 4
    return BLOCKS


def triton_acsf_element(
    plan: KernelPlan,
    vectors: torch.Tensor,
    distances: torch.Tensor,
    center: torch.Tensor,
    neighbor_el: torch.Tensor,
    n_centers: int,
    n_el: int,
    derivatives: bool,
    dtype: torch.dtype = torch.float64,
    derivative_dtype: torch.dtype | None = None,
) -> TritonACSF:
    """Values (n_c, F) and, with ``derivatives``, dG/dr in the split layout, of pairs
    (P_e,) sorted by ``center``, as ``numba_element`` takes them; tensors on one device."""
    dev = vectors.device
    tb = kernel_tables(plan, n_el, dev)
    center = center.to(torch.int64)
    nbr = neighbor_el.to(torch.int64)
    n_pairs_total = int(nbr.shape[0])
    k_r, n_col = tb.n_rk, tb.n_col
    src = torch.zeros((n_centers, k_r + n_col), dtype=torch.float64, device=dev)
    sels: dict[int, torch.Tensor] = {}
    n_pairs = np.zeros(n_el, dtype=np.int64)
    grow = torch.zeros(max(n_pairs_total, 1), dtype=torch.int64, device=dev)
    if derivatives:
        for f in range(n_el):
            if tb.n_deriv[f] == 0:
                continue
            sel = torch.nonzero(nbr == f).squeeze(1)
            sels[f] = sel
            n_pairs[f] = int(sel.shape[0])
        if n_pairs_total:
            grow[:n_pairs_total] = rank_within_value(nbr, n_el)
    n_rows = np.where(tb.n_deriv > 0, tb.n_radial + 3 * (tb.n_deriv - tb.n_radial), 0)
    d_base = np.zeros(n_el, dtype=np.int64)
    d_base[1:] = np.cumsum(n_rows * n_pairs)[:-1]
    total = int((n_rows * n_pairs).sum())
    dflat = torch.zeros(max(total, 1), dtype=torch.float64, device=dev) if derivatives else None
    dbase_t = torch.as_tensor(d_base, device=dev)
    npairs_t = torch.as_tensor(n_pairs, device=dev)
    nrad_t = torch.as_tensor(tb.n_radial, device=dev)
    seg = torch.zeros(n_centers + 1, dtype=torch.int64, device=dev)
    if n_pairs_total:
        seg[1:] = torch.cumsum(torch.bincount(center, minlength=n_centers), 0)
    seg_h = seg.cpu().numpy()
    dummy = torch.zeros(1, dtype=torch.float64, device=dev)
    m_all = int(torch.bincount(nbr * n_centers + center).max()) if n_pairs_total else 1
    per_centre = (2 * tb.n_ek + 8) * n_el * m_all * 8  # bytes: factor and neighbour tables
    chunk = max(1, min(CHUNK_CENTERS, CHUNK_BYTES // per_centre))
    for c_lo in range(0, n_centers, chunk):
        c_hi = min(n_centers, c_lo + chunk)
        lo, hi = int(seg_h[c_lo]), int(seg_h[c_hi])
        if hi == lo:
            continue
        n_c = c_hi - c_lo
        x, y, z, r, pidx, cnt, m = neighbor_tables(
            vectors, distances, center, nbr, lo, hi, c_lo, n_c, n_el
        )
        block, bj, bk, warps = _blocks(n_c, m)
        grid = (triton.cdiv(n_c, block),)
        rad = torch.zeros((n_c, max(k_r, 1)), dtype=torch.float64, device=dev)
        ang = torch.zeros((n_c, max(n_col, 1)), dtype=torch.float64, device=dev)
        dout = dflat if dflat is not None else dummy
        want = derivatives and dflat is not None
        if k_r:
            _radial_kernel[grid](
                r, pidx, cnt, grow, n_c, m, *tb.rk, k_r, *tb.cut, rad,
                *tb.rd, tb.n_rd if want else 0, dbase_t, npairs_t, dout,
                BLOCK_C=block, BLOCK_K=bk, KINDS=tb.kinds, DERIV=want, num_warps=warps,
            )  # fmt: skip
        ux, uy, uz = x / r, y / r, z / r  # unit vectors (padding: (1, 0, 0))
        fac = torch.empty(
            (2 if want else 1, max(tb.n_ek, 1), n_el, m, n_c), dtype=torch.float64, device=dev
        )
        if n_col:
            _factor_kernel[grid](
                r, cnt, n_c, m, n_el, *tb.ek, tb.n_ek, *tb.cut, fac[0], fac[-1],
                BLOCK_C=block, BLOCK_K=bk, KINDS=tb.kinds, DERIV=want, num_warps=warps,
            )  # fmt: skip
        tiles = dict(
            BLOCK_C=block, BLOCK_J=bj, BLOCK_K=bk, BLOCK_Z=tb.width, KINDS=tb.kinds,
            num_warps=warps,
        )  # fmt: skip
        fused = want and tb.n_gd > 0 and tb.values_in_derivs  # values from the dG/dr kernel
        if n_col and not fused:
            _angular_values_kernel[(grid[0], tb.n_gv)](
                x, y, z, ux, uy, uz, fac[0], cnt, n_c, m, n_el, *tb.gv, *tb.col, n_col,
                *tb.cut, ang, **tiles,
            )  # fmt: skip
        if want and tb.n_gd:
            _angular_derivs_kernel[(grid[0], tb.n_gd)](
                x, y, z, ux, uy, uz, r, fac[0], fac[-1], pidx, cnt, grow, n_c, m, n_el, *tb.gd,
                *tb.col, *tb.cut,
                dbase_t, npairs_t, nrad_t, dout, ang, n_col, VALUES=fused, **tiles,
            )  # fmt: skip
        src[c_lo:c_hi, :k_r] = rad[:, :k_r]
        src[c_lo:c_hi, k_r:] = ang[:, :n_col]
    vsrc = torch.as_tensor(plan.vsrc, dtype=torch.int64, device=dev)
    values = src.index_select(1, vsrc).to(dtype)
    if dflat is not None:
        dflat = dflat[:total].to(derivative_dtype or dtype)
    return TritonACSF(values, dflat, d_base, n_rows, sels)
