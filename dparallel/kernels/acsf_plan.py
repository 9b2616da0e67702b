"""Numeric tables for the compiled ACSF kernel, built once per central element.

:func:`build_kernel_plan` turns feature dicts (the metadata of
:meth:`dparallel.descriptors.ACSF.features` plus ``cutoff_id``) into a
:class:`~dparallel.kernels.acsf_numba.KernelPlan`: distinct cutoffs, distinct radial
parts (η, rs, cutoff) and angular parts (ζ, λ), the columns of every element pair, and
where each value and derivative column comes from. Pure numpy, no numba.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dparallel.kernels.acsf_numba import KernelPlan

__all__ = ["build_kernel_plan", "pair_table"]


def pair_table(n_el: int) -> np.ndarray:
    """(n_el, n_el) int64 index of the unordered element pair (a, b), a ≤ b, a-major."""
    table = np.zeros((n_el, n_el), dtype=np.int64)
    n = 0
    for a in range(n_el):
        for b in range(a, n_el):
            table[a, b] = table[b, a] = n
            n += 1
    return table


class _Keys:
    """Insertion-ordered set of hashable keys → index."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}

    def add(self, key: Any) -> int:  # noqa: ANN401
        return self.index.setdefault(key, len(self.index))

    def ordered(self) -> list:
        return list(self.index)


def _offsets(lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """CSR (offsets, flat) int64 arrays of a list of lists."""
    off = np.zeros(len(lists) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(x) for x in lists])
    flat = np.array([v for x in lists for v in x], dtype=np.int64)
    return off, flat


def _is_integer(zeta: float) -> bool:
    """n2p2's test for the integer-power path (|ζ - round(ζ)| ≤ DBL_MIN)."""
    return abs(zeta - round(zeta)) <= np.finfo(np.float64).tiny


def build_kernel_plan(features: Sequence[dict], elements: Sequence[str]) -> KernelPlan:
    """Kernel tables of one central element's features (feature order kept).

    Parameters
    ----------
    features
        Dicts with ``type`` (2, 3, 9), ``neighbors`` (1 or 2 symbols), ``eta``, ``rs``,
        ``zeta``, ``lambda``, ``rc``, ``cutoff_id`` and ``alpha``.
    elements
        Element symbols; neighbour elements are indices into this list.
    """
    n_el = len(elements)
    index = {e: n for n, e in enumerate(elements)}
    pt = pair_table(n_el)
    n_pt = n_el * (n_el + 1) // 2
    cuts, eks, zks = _Keys(), _Keys(), _Keys()
    rad: list[_Keys] = [_Keys() for _ in range(n_el)]
    cols: list[_Keys] = [_Keys() for _ in range(n_pt)]
    src: list[tuple] = []  # per feature: ("r", f, key) or ("a", a, b, col)
    for ft in features:
        cut = cuts.add((float(ft["rc"]), int(ft["cutoff_id"]), float(ft["alpha"])))
        nb = [index[x] for x in ft["neighbors"]]
        if ft["type"] == 2:
            src.append(("r", nb[0], rad[nb[0]].add((float(ft["eta"]), float(ft["rs"]), cut))))
            continue
        narrow = int(ft["type"] == 3)
        e = eks.add((float(ft["eta"]), float(ft["rs"]), cut, narrow))
        z = zks.add((float(ft["zeta"]), float(ft["lambda"])))
        a, b = min(nb), max(nb)
        src.append(("a", a, b, cols[pt[a, b]].add((e, z))))
    cut_l, ek_l, zk_l = cuts.ordered(), eks.ordered(), zks.ordered()
    rk_off = np.zeros(n_el + 1, dtype=np.int64)
    rk_off[1:] = np.cumsum([len(r.index) for r in rad])
    rk = [k for r in rad for k in r.ordered()]
    col_pairs = [c.ordered() for c in cols]
    p_col_off = np.zeros(n_pt + 1, dtype=np.int64)
    p_col_off[1:] = np.cumsum([len(c) for c in col_pairs])
    col_e = np.array([e for c in col_pairs for e, _ in c], dtype=np.int64)
    col_z = np.array([z for c in col_pairs for _, z in c], dtype=np.int64)
    col_scale = np.array([2.0 ** (1.0 - zk_l[z][0]) for z in col_z], dtype=np.float64)
    p_e = [sorted({e for e, _ in c}) for c in col_pairs]
    p_z = [sorted({z for _, z in c}) for c in col_pairs]
    p_c = [sorted({ek_l[e][2] for e in es if ek_l[e][3]}) for es in p_e]
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
    for s in src:
        if s[0] == "r":
            _, f, key = s
            vsrc.append(int(rk_off[f]) + key)
            dsrc[f].append(int(rk_off[f]) + key)
            dscale[f].append(1.0)
            continue
        _, a, b, local = s
        p = pt[a, b]
        vsrc.append(k_r + int(p_col_off[p]) + local)
        scale = float(col_scale[p_col_off[p] + local])
        for f, g in ((a, b), (b, a)) if a != b else ((a, b),):
            dsrc[f].append(k_r + int(s_off[f, g]) + local)
            dscale[f].append(scale)
    dsrc_off, dsrc_flat = _offsets(dsrc)
    # within each neighbour element, derivative columns follow feature order (as built)
    p_e_off, p_e_list = _offsets(p_e)
    p_z_off, p_z_list = _offsets(p_z)
    p_c_off, p_c_list = _offsets(p_c)
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
        s_off=s_off,
        vsrc=np.array(vsrc, dtype=np.int64),
        dsrc_off=dsrc_off,
        dsrc=dsrc_flat,
        dscale=np.array([v for x in dscale for v in x], dtype=f64),
    )
