"""Compiled (numba) ACSF kernel for one central element: the fast CPU path.

Same mathematics as the torch path in :mod:`dparallel.descriptors._acsf_engine`, which
stays the differentiable reference. Per centre i the kernel

1. sorts i's neighbours by element (counting sort), so the partners k of a neighbour j
   come in one contiguous block per element and each block belongs to one element pair;
2. evaluates per neighbour, once, the cutoff f_c(r_ij) of every distinct cutoff and the
   radial factor a(r_ij) = exp(-η(r_ij - rs)²) f_c(r_ij) of every distinct (η, rs, cutoff)
   used by angular functions (n2p2's per-pair caches), plus the radial (type 2) sums;
3. for each neighbour j and each partner block whose element pair has functions, gathers
   the partners k (values: only those with r_jk < r_c of the pair's narrow functions,
   rejected on r_jk² before the square root; derivatives: all, masked) and evaluates
   loops over k, vectorised by LLVM (AVX2/FMA; exp and cos are the branch-free versions
   of :mod:`dparallel.kernels._vecmath`): f_c(r_jk) once per distinct cutoff,
   exp(-η(r_jk - rs)²) once per distinct (η, rs), (1 + λ cos θ)^ζ once per distinct
   (ζ, λ), then one reduction over k per function of that element pair only;
4. writes values, and per-pair derivatives ∂G_i/∂r_ij, straight into the output layout
   (pair-major, or the store's split layout: :class:`SplitLayout`).

Semantics are n2p2's (SymGrpExpAngn/Angw): an angular term is exactly 0 where
1 + λ cos θ ≤ 0; integer ζ (any sign) by repeated multiplication, other ζ by ``pow``;
any real λ and η; rs honoured in every exponential.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from dparallel.errors import BackendUnavailableError

__all__ = [
    "Fused",
    "KernelPlan",
    "SplitLayout",
    "acsf_element",
    "no_network",
    "no_split",
    "numba_available",
    "radial_columns",
    "split_layout",
]

try:  # pragma: no cover - exercised when numba is installed
    import numba

    _HAVE_NUMBA = True
except ImportError:  # pragma: no cover
    _HAVE_NUMBA = False

# numba caches compiled code keyed on this file's source only, not on the helpers it
# inlines: change this line whenever dparallel.kernels._vecmath changes.
_VECMATH_VERSION = 3
_TANH1_3 = math.tanh(1.0) ** 3
_PI_2 = 0.5 * math.pi


def numba_available() -> bool:
    """Whether the compiled backend can be used."""
    return _HAVE_NUMBA


class KernelPlan(NamedTuple):
    """Numeric tables of one central element's functions (built by the engine's plan).

    Slots: for a neighbour of element f, the derivative accumulators of the angular
    functions of element pair (f, g) seen with partners of element g start at
    ``s_off[f, g]`` (one per column of that pair, in column order).
    """

    pt: np.ndarray  # (n_el, n_el) int64 unordered element-pair index
    cut_rc: np.ndarray  # (C,) distinct cutoffs: rc, n2p2 type, inner α
    cut_kind: np.ndarray  # (C,) int64
    cut_alpha: np.ndarray  # (C,)
    rk_off: np.ndarray  # (n_el + 1,) radial keys of neighbour element f: [rk_off[f], rk_off[f+1])
    rk_eta: np.ndarray  # (K_r,)
    rk_rs: np.ndarray  # (K_r,)
    rk_cut: np.ndarray  # (K_r,) int64 cutoff id
    ek_eta: np.ndarray  # (E,) radial parts of angular functions
    ek_rs: np.ndarray  # (E,)
    ek_cut: np.ndarray  # (E,) int64 cutoff id
    ek_narrow: np.ndarray  # (E,) int64: 1 = type 3 (has the r_jk factor)
    zk_zeta: np.ndarray  # (Z,) angular parts (ζ, λ)
    zk_lam: np.ndarray  # (Z,)
    zk_int: np.ndarray  # (Z,) int64 ζ when ζ is an integer
    zk_isint: np.ndarray  # (Z,) int64 0/1
    p_col_off: np.ndarray  # (n_pt + 1,) columns of element pair p
    col_e: np.ndarray  # (K,) int64 radial part of each column
    col_z: np.ndarray  # (K,) int64 angular part
    col_scale: np.ndarray  # (K,) 2^(1-ζ)
    # triplet tables indexed by pair p + mode·n_pt; mode 1 leaves out separable columns
    p_e_off: np.ndarray  # (2 n_pt + 1,) radial parts used by the triplet columns
    p_e_list: np.ndarray  # int64
    p_z_off: np.ndarray  # (2 n_pt + 1,) angular parts used by the triplet columns
    p_z_list: np.ndarray  # int64
    p_c_off: np.ndarray  # (2 n_pt + 1,) cutoffs of the narrow triplet columns
    p_c_list: np.ndarray  # int64
    p_rc2: np.ndarray  # (2 n_pt,) reject triplets with r_jk² ≥ this (inf with wide columns)
    p_rmax: np.ndarray  # (2 n_pt,) neighbours at r ≥ this take no part in triplets
    p_tcol_off: np.ndarray  # (2 n_pt + 1,) columns evaluated over triplets
    p_tcol: np.ndarray  # int64
    p_scol_off: np.ndarray  # (n_pt + 1,) separable columns of pair p (O(n) per centre)
    p_scol: np.ndarray  # int64
    p_ab: np.ndarray  # (n_pt, 2) int64 elements (a ≤ b) of pair p
    e_sep: np.ndarray  # (E,) int64 row of a radial part in the tensor sums T, or -1
    mono_parent: np.ndarray  # (M,) int64 monomial μ = parent · u[axis], μ ≤ max separable ζ
    mono_axis: np.ndarray  # (M,) int64
    mono_up: np.ndarray  # (M, 3) int64 index of μ + e_α, -1 beyond the degree
    mono_power: np.ndarray  # (M, 3) int64 exponents of μ
    z_sep: np.ndarray  # (Z, M) C(ζ, |μ|) λ^|μ| |μ|!/μ! (separable angular parts)
    z_sep_self: np.ndarray  # (Z,) (1 + λ)^ζ, weight of the j = k terms
    sep_min_neighbors: int  # centres with fewer neighbours use mode 0 (all over triplets)
    s_off: np.ndarray  # (n_el, n_el) int64 accumulator slots, see class doc
    vsrc: np.ndarray  # (F,) int64 value column ← radial key (< K_r) or K_r + column
    dsrc_off: np.ndarray  # (n_el + 1,) derivative columns of neighbour element f
    dsrc: np.ndarray  # (Σ F_f,) int64 radial key (< K_r) or K_r + slot
    dscale: np.ndarray  # (Σ F_f,) factor of each derivative column
    dfeat: np.ndarray  # (Σ F_f,) int64 feature column of each derivative column


class Fused(NamedTuple):
    """The atomic network of the central element and where energies, forces and virial go.

    With ``on`` the kernel leaves out pairs beyond ``r_max``, evaluates the network on
    each centre's descriptors as soon as they are complete, and contracts ∂E/∂G_i with
    that centre's derivative terms into forces and virial at once: no ∂G/∂r output
    (``dflat`` may be empty), one scatter per triplet instead of one per column.
    Network: per layer ``layers[l] = (kind, n_in, n_out, offset into params)``, kind
    0 = linear (weights W (n_out, n_in) row-major, then the bias),
    1 = divide by ``params[off]``,
    2 = tanh; input (G - shift)·factor + consts[0], energy out·consts[1] + consts[2].
    """

    on: bool
    layers: np.ndarray  # (L, 4) int64
    params: np.ndarray  # float64
    shift: np.ndarray  # (F,)
    factor: np.ndarray  # (F,)
    consts: np.ndarray  # (3,) input offset, energy scale, reference energy
    width: int  # widest layer
    r_max: float  # pairs at r ≥ r_max are left out (the list may hold more, e.g. a skin)
    first: np.ndarray  # (P,) int64 global row of each pair's centre i
    second: np.ndarray  # (P,) int64 global row of each pair's neighbour j
    structure: np.ndarray  # (N,) int64 structure of each atom (virial)
    grad: np.ndarray  # (N, 3) float64 ∂E/∂r, accumulated (eV/Å)
    virial: np.ndarray  # (S, 3, 3) float64 accumulated (eV), or (0, 3, 3) to skip
    energies: np.ndarray  # (n_e,) float64 out: atomic energies (eV)


class SplitLayout(NamedTuple):
    """Where the kernel writes dG/dr when ``on``: per neighbour element f a block at
    ``d_base[f]`` of ``n_radial[f]`` radial columns as one number per pair, s = ∂G/∂r_ij · r̂_ij
    ((n_radial[f], n_pairs[f]), feature-major), then the other columns as 3-vectors
    ((n_f − n_radial[f], 3, n_pairs[f])): the store's layout (docs/store-format.md), so a
    featurize task writes the kernel's output as it is. Off: (n_pairs[f], n_f, 3) pair-major.
    ``column[c]`` is derivative column c's index among its block's radial or other columns.
    Radial columns are those of radial (type 2) functions, whose derivative is s · r̂_ij."""

    on: bool
    n_pairs: np.ndarray  # (n_el,) int64 pairs of each neighbour element's block
    n_radial: np.ndarray  # (n_el,) int64 radial columns of each block
    column: np.ndarray  # (Σ F_f,) int64 index among the radial or the other columns


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
            # (axpys over rows of Wᵀ were ~0.06 ms per MD step slower)
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
    # one loop per kind (a kind test inside the loop kept it from vectorising, 3-5x slower);
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


def _reduce_dot(a, b, n):  # noqa: ANN001, ANN202
    """Σ_q a[q]·b[q] (vectorised: reassociation allowed)."""
    s = 0.0
    for q in range(n):
        s += a[q] * b[q]
    return s


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
    net,  # Fused: with net.on (needs derivatives, float64) energies/forces, not dflat
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
                nq = 0
                j = blk[a]
                while True:  # the buffer is flushed whenever the next j might overflow it
                    j, nq = _partners(
                        vx, vy, vz, rr, j, blk[a + 1], blk[b], blk[b + 1], rc2, rmx, cap,
                        dk2, jj, kk, d2, nq,
                    )  # fmt: skip
                    if j == blk[a + 1]:
                        break
                    _flush(
                        plan, p, a, b, nq, jj, kk, d2, vx, vy, vz, inv_r, a_n, dar_n,
                        g_col, acc, derivatives, wk, wk_e, wk_z, wk_c, wk_g,
                        tstore, tj, tk, tseg, tcount,
                    )  # fmt: skip
                    nq = 0
                if nq:
                    _flush(
                        plan, p, a, b, nq, jj, kk, d2, vx, vy, vz, inv_r, a_n, dar_n,
                        g_col, acc, derivatives, wk, wk_e, wk_z, wk_c, wk_g,
                        tstore, tj, tk, tseg, tcount,
                    )  # fmt: skip
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


def _triplet_forces(plan, w, k_r, n, wcol, tstore, tj, tk, tseg, n_seg, vx, vy, vz, facc, wk):  # noqa: ANN001, ANN202
    """facc[m] = (P, V) with Σ_columns ∂E/∂G_col · ∂G_col/∂r_im = P r_im + V over the triplet
    columns: per triplet the stored per-column Pj, Pk, Q weighted and summed, then one
    scatter per triplet (instead of one per column and triplet)."""
    for d in range(w.shape[0]):
        s = plan.vsrc[d]
        if s >= k_r:
            wcol[s - k_r] = w[d] * plan.col_scale[s - k_r]
    facc[:n] = 0.0
    pj = wk[_PJ]
    pk = wk[_PK]
    qv = wk[_QV]
    for sg in range(n_seg):
        p = tseg[sg, 0]
        q0 = tseg[sg, 1]
        nq = tseg[sg, 2]
        pj[:nq] = 0.0
        pk[:nq] = 0.0
        qv[:nq] = 0.0
        for tc in range(plan.p_tcol_off[p], plan.p_tcol_off[p + 1]):
            col = plan.p_tcol[tc]
            wc = wcol[col]
            tpj = tstore[col, 0, q0 : q0 + nq]  # slices: no per-element index fix-up
            tpk = tstore[col, 1, q0 : q0 + nq]
            tqv = tstore[col, 2, q0 : q0 + nq]
            for q in range(nq):  # vectorised
                pj[q] += wc * tpj[q]
                pk[q] += wc * tpk[q]
                qv[q] += wc * tqv[q]
        _scatter(pj, pk, qv, tj[q0:], tk[q0:], nq, vx, vy, vz, facc, facc)


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


def _contract(plan, net, w, n, el, blk, orig, vx, vy, vz, inv_r, d_rad, acc, facc, k_r,
              use_acc, wrad, wslot, prad, v):  # fmt: skip  # noqa: ANN001, ANN202
    """Forces and virial of one centre: s_ij = Σ_a w_a ∂G_a/∂r_ij, ∂E/∂r_j += s_ij,
    ∂E/∂r_i −= s_ij, W −= r_ij ⊗ s_ij (as :func:`dparallel.kernels.pair_forces`).

    ∂G/∂r_ij = (radial + P) r_ij + V: triplet columns from ``facc``, separable ones from
    ``acc`` (only if ``use_acc``), radial ones from ``d_rad``, with the weights of each
    radial key and accumulator slot summed first (a feature may share its key)."""
    n_el = wslot.shape[0]
    wrad[:] = 0.0
    wslot[:] = 0.0
    for f in range(n_el):
        for dc in range(plan.dsrc_off[f], plan.dsrc_off[f + 1]):
            s = plan.dsrc[dc]
            ws = w[plan.dfeat[dc]] * plan.dscale[dc]
            if s < k_r:
                wrad[s] += ws
            else:
                wslot[f, s - k_r] += ws
    for f in range(n_el):  # radial: Σ_k w_k a'_k(r_ij), vectorised over the neighbours
        m0 = blk[f]
        nm = blk[f + 1] - m0
        pr = prad[m0 : m0 + nm]  # slices: contiguous loads
        for m in range(nm):
            pr[m] = 0.0
        for kr in range(plan.rk_off[f], plan.rk_off[f + 1]):
            wk = wrad[kr]
            dr = d_rad[kr, m0 : m0 + nm]
            for m in range(nm):
                pr[m] += wk * dr[m]
    n_sl = wslot.shape[1] if use_acc else 0
    gx = 0.0
    gy = 0.0
    gz = 0.0
    v[:] = 0.0  # (3, 3) Σ r_ij ⊗ s_ij
    for m in range(n):
        pr = facc[m, 0] + prad[m] * inv_r[m]
        ux = facc[m, 1]
        uy = facc[m, 2]
        uz = facc[m, 3]
        wf = wslot[el[m]]
        for sl in range(n_sl):
            ws = wf[sl]
            pr += ws * acc[m, sl, 0]
            ux += ws * acc[m, sl, 1]
            uy += ws * acc[m, sl, 2]
            uz += ws * acc[m, sl, 3]
        sx = pr * vx[m] + ux
        sy = pr * vy[m] + uy
        sz = pr * vz[m] + uz
        j = net.second[orig[m]]
        net.grad[j, 0] += sx
        net.grad[j, 1] += sy
        net.grad[j, 2] += sz
        gx += sx
        gy += sy
        gz += sz
        for a in range(3):
            r = vx[m] if a == 0 else (vy[m] if a == 1 else vz[m])
            v[a, 0] += r * sx
            v[a, 1] += r * sy
            v[a, 2] += r * sz
    if n == 0:
        return
    i = net.first[orig[0]]
    net.grad[i, 0] -= gx
    net.grad[i, 1] -= gy
    net.grad[i, 2] -= gz
    if net.virial.shape[0]:
        w3 = net.virial[net.structure[i]]
        for a in range(3):
            for b in range(3):
                w3[a, b] -= v[a, b]


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


_CAP = 512  # triplets per buffer flush: long vector loops, work arrays stay in L1/L2
# rows of the per-triplet scalar work array
_R, _IRJK, _C, _IJ, _IK, _CJ, _CK, _QQ, _PJ, _PK, _QV = range(11)
_N_WK = 11


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
            for q in range(nq):
                d = t_r[q] - rs
                w[q] = aj[q] * ak[q] * vexp_like(meta * d * d) * fc[q]
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


if _HAVE_NUMBA:  # pragma: no branch
    from dparallel.kernels._vecmath import like, vcos_pi, vexp, vexp_like, vsin_pi, vtanh_pos

    def _jit(fastmath: set[str], **kw: bool):  # noqa: ANN202
        """njit with cache, numpy error model (no ZeroDivisionError checks: loops vectorise)."""
        return numba.njit(cache=True, error_model="numpy", fastmath=fastmath, **kw)

    def _jit_views(fastmath: set[str]):  # noqa: ANN202
        """:func:`_jit` for helpers that allocate nothing and return no array: compiled
        without the runtime's reference counting (_nrt=False), so the array views they
        take are free instead of an atomic increment and decrement each."""
        return numba.njit(cache=True, error_model="numpy", fastmath=fastmath, _nrt=False)

    _CONTRACT = {"contract"}  # FMA only: exp/cos range reductions stay exact
    _REASSOC = {"contract", "reassoc", "nsz", "arcp"}  # reductions may be reordered
    _unit = _jit(_CONTRACT)(_unit)
    _put = _jit(_CONTRACT)(_put)
    _cutoff_fill = _jit_views(_CONTRACT)(_cutoff_fill)
    _angular_part = _jit_views(_CONTRACT)(_angular_part)
    _reduce_dot = _jit(_REASSOC)(_reduce_dot)
    _radial_part = _jit_views(_CONTRACT)(_radial_part)
    _column_derivative = _jit_views(_CONTRACT)(_column_derivative)
    _flush = _jit_views(_CONTRACT)(_flush)
    _separable = _jit_views(_CONTRACT)(_separable)
    _add_rows = _jit_views(_REASSOC)(_add_rows)
    _matvec = _jit_views(_REASSOC)(_matvec)
    _network = _jit_views(_REASSOC)(_network)
    _contract = _jit_views(_CONTRACT)(_contract)
    _scatter = _jit_views(_CONTRACT)(_scatter)
    _triplet_forces = _jit_views(_CONTRACT)(_triplet_forces)
    _partners = _jit_views(_CONTRACT)(_partners)
    _radial = _jit_views(_CONTRACT)(_radial)
    _write_split = _jit_views(_CONTRACT)(_write_split)
    _acsf_element_jit = _jit(_CONTRACT, nogil=True)(_acsf_element)


def no_network() -> Fused:
    """The ``net`` argument of a kernel call without the fused network (values, dG/dr)."""
    i1 = np.zeros(0, dtype=np.int64)
    f1 = np.zeros(0)
    return Fused(
        False, np.zeros((0, 4), dtype=np.int64), f1, f1, f1, f1, 0, 0.0, i1, i1, i1,
        np.zeros((0, 3)), np.zeros((0, 3, 3)), f1,
    )  # fmt: skip


def no_split() -> SplitLayout:
    """The ``split`` argument of a kernel call with pair-major dG/dr (or none)."""
    i1 = np.zeros(0, dtype=np.int64)
    return SplitLayout(False, i1, i1, i1)


def radial_columns(plan: KernelPlan) -> np.ndarray:
    """(Σ F_f,) bool: which derivative columns are radial (from a radial key; ∂G/∂r_ij = s r̂)."""
    return plan.dsrc < plan.rk_eta.shape[0]


def split_layout(plan: KernelPlan, n_pairs: np.ndarray) -> SplitLayout:
    """:class:`SplitLayout` of ``plan`` for blocks of ``n_pairs`` (n_el,) pairs."""
    radial = radial_columns(plan)  # (Σ F_f,)
    column = np.zeros(radial.shape[0], dtype=np.int64)
    n_radial = np.zeros(n_pairs.shape[0], dtype=np.int64)
    for f in range(n_pairs.shape[0]):
        lo, hi = int(plan.dsrc_off[f]), int(plan.dsrc_off[f + 1])
        r = radial[lo:hi]
        column[lo:hi] = np.where(r, np.cumsum(r) - 1, np.cumsum(~r) - 1)
        n_radial[f] = int(r.sum())
    return SplitLayout(True, n_pairs.astype(np.int64), n_radial, column)


def acsf_element(*args) -> None:  # noqa: ANN002
    """Run the compiled kernel (arguments as :func:`_acsf_element`)."""
    if not _HAVE_NUMBA:
        raise BackendUnavailableError("backend='numba' needs numba (pip install numba)")
    _acsf_element_jit(*args)
