"""Numeric tables for the compiled ACSF kernel, built once per central element (pure numpy):
:func:`build_kernel_plan` turns feature dicts (``ACSF.features`` plus ``cutoff_id``) into a
:class:`~dparallel.kernels.acsf_layout.KernelPlan`.
"""

from __future__ import annotations

from math import comb, factorial
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.kernels.acsf_layout import KernelPlan

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "SEPARABLE_MAX_ZETA",
    "SEPARABLE_MIN_NEIGHBORS",
    "build_kernel_plan",
    "key_index",
    "monomials",
    "pair_table",
]

#: Wide (type 9) functions with integer 1 ≤ ζ ≤ this and |λ| ≤ 1 are evaluated in O(n)
#: per centre from tensor powers of the unit vectors instead of over neighbour pairs.
SEPARABLE_MAX_ZETA = 6
#: ... for centres with at least this many neighbours (fewer: over neighbour pairs).
SEPARABLE_MIN_NEIGHBORS = 24


def pair_table(n_el: int) -> np.ndarray:
    """(n_el, n_el) int64 index of the unordered element pair (a, b), a ≤ b, a-major."""
    table = np.zeros((n_el, n_el), dtype=np.int64)
    n = 0
    for a in range(n_el):
        for b in range(a, n_el):
            table[a, b] = table[b, a] = n
            n += 1
    return table


def key_index(keys: list, key: Any) -> int:  # noqa: ANN401
    """Position of ``key`` in ``keys`` (insertion-ordered), appended when new."""
    try:
        return keys.index(key)
    except ValueError:
        keys.append(key)
        return len(keys) - 1


def _offsets(lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """CSR (offsets, flat) int64 arrays of a list of lists."""
    off = np.zeros(len(lists) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(x) for x in lists])
    flat = np.array([v for x in lists for v in x], dtype=np.int64)
    return off, flat


def _is_integer(zeta: float) -> bool:
    """n2p2's test for the integer-power path (|ζ - round(ζ)| ≤ DBL_MIN)."""
    return bool(abs(zeta - round(zeta)) <= np.finfo(np.float64).tiny)


def monomials(degree: int) -> dict[str, np.ndarray]:
    """Monomials x^p y^q z^r of total degree ≤ ``degree`` and their tables (see KernelPlan).

    Ordered by degree; ``parent``/``axis``: the monomial times which coordinate gives this
    one; ``weight``: multinomial |μ|!/(p! q! r!); ``up[μ, α]``: index of μ + e_α (or -1).
    """
    powers = [(0, 0, 0)]
    for d in range(1, degree + 1):
        powers += [(p, q, d - p - q) for p in range(d, -1, -1) for q in range(d - p, -1, -1)]
    at = {mu: n for n, mu in enumerate(powers)}
    parent = np.zeros(len(powers), dtype=np.int64)
    axis = np.zeros(len(powers), dtype=np.int64)
    up = np.full((len(powers), 3), -1, dtype=np.int64)
    for n, mu in enumerate(powers):
        for a in range(3):
            nu = tuple(m + (a == b) for b, m in enumerate(mu))
            up[n, a] = at.get(nu, -1)  # type: ignore[arg-type]
        if n:
            a = next(b for b in range(3) if mu[b] > 0)
            parent[n] = at[tuple(m - (a == b) for b, m in enumerate(mu))]  # type: ignore[index]
            axis[n] = a
    weight = np.array(
        [
            factorial(sum(mu)) / (factorial(mu[0]) * factorial(mu[1]) * factorial(mu[2]))
            for mu in powers
        ]
    )
    return {
        "power": np.array(powers, dtype=np.int64),
        "degree": np.array([sum(mu) for mu in powers], dtype=np.int64),
        "parent": parent,
        "axis": axis,
        "up": up,
        "weight": weight,
    }


def _separable(zeta: float, lam: float, max_zeta: int) -> bool:
    """Whether (1 + λc)^ζ is a polynomial in c that n2p2's ≤ 0 rule never cuts."""
    return _is_integer(zeta) and 1 <= round(zeta) <= max_zeta and abs(lam) <= 1.0


def build_kernel_plan(features: Sequence[dict], elements: Sequence[str]) -> KernelPlan:
    """Kernel tables of one central element's ``features`` (dicts with ``type``,
    ``neighbors``, ``eta``, ``rs``, ``zeta``, ``lambda``, ``rc``, ``cutoff_id``, ``alpha``;
    their order kept), neighbour elements as indices into ``elements``."""
    n_el = len(elements)
    index = {e: n for n, e in enumerate(elements)}
    pt = pair_table(n_el)
    n_pt = n_el * (n_el + 1) // 2
    cut_l: list = []
    ek_l: list = []
    zk_l: list = []
    rad: list[list] = [[] for _ in range(n_el)]
    col_pairs: list[list] = [[] for _ in range(n_pt)]
    src: list[tuple] = []  # per feature: ("r", f, key) or ("a", a, b, col)
    for ft in features:
        cut = key_index(cut_l, (float(ft["rc"]), int(ft["cutoff_id"]), float(ft["alpha"])))
        nb = [index[x] for x in ft["neighbors"]]
        if ft["type"] == 2:
            src.append(
                ("r", nb[0], key_index(rad[nb[0]], (float(ft["eta"]), float(ft["rs"]), cut)))
            )
            continue
        narrow = int(ft["type"] == 3)
        e = key_index(ek_l, (float(ft["eta"]), float(ft["rs"]), cut, narrow))
        z = key_index(zk_l, (float(ft["zeta"]), float(ft["lambda"])))
        a, b = min(nb), max(nb)
        src.append(("a", a, b, key_index(col_pairs[pt[a, b]], (e, z))))
    rk_off = np.zeros(n_el + 1, dtype=np.int64)
    rk_off[1:] = np.cumsum([len(r) for r in rad])
    rk = [k for r in rad for k in r]
    p_col_off = np.zeros(n_pt + 1, dtype=np.int64)
    p_col_off[1:] = np.cumsum([len(c) for c in col_pairs])
    col_e = np.array([e for c in col_pairs for e, _ in c], dtype=np.int64)
    col_z = np.array([z for c in col_pairs for _, z in c], dtype=np.int64)
    col_scale = np.array([2.0 ** (1.0 - zk_l[z][0]) for z in col_z], dtype=np.float64)
    # wide columns with a polynomial angular part go the O(n) way, the rest over triplets
    sep = [
        not ek_l[col_e[c]][3]
        and _separable(zk_l[col_z[c]][0], zk_l[col_z[c]][1], SEPARABLE_MAX_ZETA)
        for c in range(len(col_e))
    ]
    p_scol = [[c for c in range(p_col_off[p], p_col_off[p + 1]) if sep[c]] for p in range(n_pt)]
    # triplet columns per pair in two modes: [0, n_pt) every column (centres with few
    # neighbours, where the O(n) sums would cost more and lose the exact zero of an empty
    # sum), [n_pt, 2 n_pt) all but the separable ones
    p_tcol = [list(range(p_col_off[p], p_col_off[p + 1])) for p in range(n_pt)]
    p_tcol += [
        [c for c in range(p_col_off[p], p_col_off[p + 1]) if not sep[c]] for p in range(n_pt)
    ]
    p_e = [sorted({int(col_e[c]) for c in cs}) for cs in p_tcol]
    p_z = [sorted({int(col_z[c]) for c in cs}) for cs in p_tcol]
    p_c = [sorted({ek_l[e][2] for e in es if ek_l[e][3]}) for es in p_e]
    sep_e = sorted({int(col_e[c]) for cs in p_scol for c in cs})
    e_sep = np.full(len(ek_l), -1, dtype=np.int64)
    e_sep[sep_e] = np.arange(len(sep_e))
    degree = max((round(zk_l[col_z[c]][0]) for cs in p_scol for c in cs), default=0)
    mono = monomials(degree)
    z_sep = np.zeros((len(zk_l), len(mono["degree"])))  # C(ζ, |μ|) λ^|μ| |μ|!/μ!
    z_sep_self = np.zeros(len(zk_l))  # Σ_m C(ζ, m) λ^m = (1 + λ)^ζ: the j = k terms
    for z in {int(col_z[c]) for cs in p_scol for c in cs}:
        zeta, lam = round(zk_l[z][0]), zk_l[z][1]
        binom = np.array([comb(zeta, int(d)) if d <= zeta else 0 for d in mono["degree"]])
        z_sep[z] = binom * lam ** mono["degree"].astype(float) * mono["weight"]
        z_sep_self[z] = (1.0 + lam) ** zeta
    p_ab = np.array([(a, b) for a in range(n_el) for b in range(a, n_el)], dtype=np.int64)
    p_rc2 = np.array(
        [
            np.inf
            if any(not ek_l[e][3] for e in es) or not es
            else max(cut_l[ek_l[e][2]][0] for e in es) ** 2
            for es in p_e
        ],
        dtype=np.float64,
    )
    p_rmax = np.array(
        [max((cut_l[ek_l[e][2]][0] for e in es), default=0.0) for es in p_e], dtype=np.float64
    )
    # accumulator slots of a neighbour of element f: per partner element g, pair (f, g)'s columns
    s_off = np.zeros((n_el, n_el), dtype=np.int64)
    for f in range(n_el):
        n = 0
        for g in range(n_el):
            s_off[f, g] = n
            n += len(col_pairs[pt[f, g]])
    k_r = len(rk)
    vsrc = []
    dsrc: list[list[int]] = [[] for _ in range(n_el)]
    dscale: list[list[float]] = [[] for _ in range(n_el)]
    dfeat: list[list[int]] = [[] for _ in range(n_el)]
    for d, s in enumerate(src):
        if s[0] == "r":
            _, f, key = s
            vsrc.append(int(rk_off[f]) + key)
            dsrc[f].append(int(rk_off[f]) + key)
            dscale[f].append(1.0)
            dfeat[f].append(d)
            continue
        _, a, b, local = s
        p = pt[a, b]
        vsrc.append(k_r + int(p_col_off[p]) + local)
        scale = float(col_scale[p_col_off[p] + local])
        for f, g in ((a, b), (b, a)) if a != b else ((a, b),):
            dsrc[f].append(k_r + int(s_off[f, g]) + local)
            dscale[f].append(scale)
            dfeat[f].append(d)
    dsrc_off, dsrc_flat = _offsets(dsrc)
    # within each neighbour element, derivative columns follow feature order (as built)
    p_e_off, p_e_list = _offsets(p_e)
    p_z_off, p_z_list = _offsets(p_z)
    p_c_off, p_c_list = _offsets(p_c)
    p_tcol_off, p_tcol_list = _offsets(p_tcol)
    p_scol_off, p_scol_list = _offsets(p_scol)
    f64 = np.float64
    return KernelPlan(
        pt=pt,
        cut_rc=np.array([c[0] for c in cut_l], dtype=f64),
        cut_kind=np.array([c[1] for c in cut_l], dtype=np.int64),
        cut_alpha=np.array([c[2] for c in cut_l], dtype=f64),
        rk_off=rk_off,
        rk_eta=np.array([k[0] for k in rk], dtype=f64),
        rk_rs=np.array([k[1] for k in rk], dtype=f64),
        rk_cut=np.array([k[2] for k in rk], dtype=np.int64),
        ek_eta=np.array([k[0] for k in ek_l], dtype=f64),
        ek_rs=np.array([k[1] for k in ek_l], dtype=f64),
        ek_cut=np.array([k[2] for k in ek_l], dtype=np.int64),
        ek_narrow=np.array([k[3] for k in ek_l], dtype=np.int64),
        zk_zeta=np.array([k[0] for k in zk_l], dtype=f64),
        zk_lam=np.array([k[1] for k in zk_l], dtype=f64),
        zk_int=np.array([round(k[0]) if _is_integer(k[0]) else 0 for k in zk_l], dtype=np.int64),
        zk_isint=np.array([int(_is_integer(k[0])) for k in zk_l], dtype=np.int64),
        p_col_off=p_col_off,
        col_e=col_e,
        col_z=col_z,
        col_scale=col_scale,
        p_e_off=p_e_off,
        p_e_list=p_e_list,
        p_z_off=p_z_off,
        p_z_list=p_z_list,
        p_c_off=p_c_off,
        p_c_list=p_c_list,
        p_rc2=p_rc2,
        p_rmax=p_rmax,
        p_tcol_off=p_tcol_off,
        p_tcol=p_tcol_list,
        p_scol_off=p_scol_off,
        p_scol=p_scol_list,
        p_ab=p_ab.reshape(-1, 2),
        e_sep=e_sep,
        mono_parent=mono["parent"],
        mono_axis=mono["axis"],
        mono_up=mono["up"],
        mono_power=mono["power"],
        z_sep=z_sep,
        z_sep_self=z_sep_self,
        sep_min_neighbors=SEPARABLE_MIN_NEIGHBORS,
        s_off=s_off,
        vsrc=np.array(vsrc, dtype=np.int64),
        dsrc_off=dsrc_off,
        dsrc=dsrc_flat,
        dscale=np.array([v for x in dscale for v in x], dtype=f64),
        dfeat=np.array([v for x in dfeat for v in x], dtype=np.int64),
    )
