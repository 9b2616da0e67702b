"""Host-side tables of the Triton ACSF kernel (:mod:`.triton_acsf`): a
:class:`~dparallel.kernels.acsf_layout.KernelPlan` flattened into per-column, per-slot and
per-group device arrays, and the padded neighbour tables of a chunk of centres (torch index
ops). A group: the angular columns of one element pair (or slot pair) that differ only in
(ζ, λ), at most :data:`GROUP_WIDTH` of them (docs/kernels.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

if TYPE_CHECKING:
    from dparallel.kernels.acsf_layout import KernelPlan

__all__ = ["GROUP_WIDTH", "Tables", "kernel_tables", "neighbor_tables", "rank_within_value"]

#: Most (ζ, λ) columns of one group (a power of 2): accumulators per member in registers.
GROUP_WIDTH = 4


class Tables(NamedTuple):
    """Device copies of one plan's parameter tables, as the kernels read them."""

    kinds: int  # bitmask of the cutoff types used
    cut: tuple[torch.Tensor, ...]  # rc, kind, alpha
    rk: tuple[torch.Tensor, ...]  # element, eta, rs, cutoff id (K_r,)
    n_rk: int
    col: tuple[torch.Tensor, ...]  # per angular column: eta, rs, cut, narrow, zeta, lam,
    # integer zeta, whether zeta is an integer, scale
    n_col: int
    rd: tuple[torch.Tensor, ...]  # radial derivative columns: element, key, split column
    n_rd: int
    ek: tuple[torch.Tensor, ...]  # angular radial parts: eta, rs, cutoff id (E,)
    n_ek: int
    gv: tuple[torch.Tensor, ...]  # value groups: elements a, b, radial part, first member,
    # members; then the members' columns
    n_gv: int
    gd: tuple[torch.Tensor, ...]  # derivative groups: f, g, radial part, first member,
    # members; then the members' columns and split columns
    n_gd: int
    values_in_derivs: bool  # the derivative groups with f ≤ g hold every column once
    width: int  # members per group, padded to a power of 2 (the kernels' BLOCK_Z)
    n_radial: np.ndarray  # (n_el,)
    n_deriv: np.ndarray  # (n_el,) derivative columns per neighbour element


def _groups(keys: list[tuple[int, ...]]) -> list[list[int]]:
    """Indices of equal keys (in order of first appearance), cut into runs of GROUP_WIDTH."""
    by_key: dict[tuple[int, ...], list[int]] = {}
    for i, key in enumerate(keys):
        by_key.setdefault(key, []).append(i)
    return [g[s : s + GROUP_WIDTH] for g in by_key.values() for s in range(0, len(g), GROUP_WIDTH)]


def _flatten(groups: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first member, member count) per group and the members, concatenated."""
    n = np.array([len(g) for g in groups], dtype=np.int64)
    lo = np.cumsum(n) - n
    members = np.array([i for g in groups for i in g], dtype=np.int64)
    return lo, n, members


def _slots(plan: KernelPlan, n_el: int) -> tuple[list[list[int]], list[list[int]], np.ndarray]:
    """Radial derivative columns (element, key, split column) and angular slots (f, g,
    column, split column) of ``plan``, and the radial columns per neighbour element."""
    k_r = int(plan.rk_eta.shape[0])
    rd: list[list[int]] = [[], [], []]
    sl: list[list[int]] = [[], [], [], []]
    n_radial = np.zeros(n_el, dtype=np.int64)
    for f in range(n_el):
        n_rad = n_ang = 0
        for dc in range(int(plan.dsrc_off[f]), int(plan.dsrc_off[f + 1])):
            s = int(plan.dsrc[dc])
            if s < k_r:
                for lst, v in zip(rd, (f, s, n_rad), strict=True):
                    lst.append(v)
                n_rad += 1
                continue
            slot = s - k_r
            g = max(g for g in range(n_el) if plan.s_off[f, g] <= slot)
            c = int(plan.p_col_off[plan.pt[f, g]]) + slot - int(plan.s_off[f, g])
            for lst, v in zip(sl, (f, g, c, n_ang), strict=True):
                lst.append(v)
            n_ang += 1
        n_radial[f] = n_rad
    return rd, sl, n_radial


def kernel_tables(plan: KernelPlan, n_el: int, device: torch.device) -> Tables:
    """Flatten ``plan`` into the per-column, per-slot and per-group tables of the kernels."""

    def dev(a: np.ndarray | list, dtype: torch.dtype) -> torch.Tensor:
        t = torch.as_tensor(np.asarray(a), dtype=dtype)
        if t.numel() == 0:  # a valid pointer even when a table is empty
            t = torch.zeros(1, dtype=dtype)
        return t.to(device)

    i64, f64 = torch.int64, torch.float64
    k_r = int(plan.rk_eta.shape[0])
    rk_f = np.repeat(np.arange(n_el), np.diff(plan.rk_off))
    n_col = int(plan.col_e.shape[0])
    col_pair = np.repeat(np.arange(plan.p_ab.shape[0]), np.diff(plan.p_col_off))
    e, z = plan.col_e, plan.col_z
    col = (
        dev(plan.ek_eta[e], f64), dev(plan.ek_rs[e], f64), dev(plan.ek_cut[e], i64),
        dev(plan.ek_narrow[e], i64), dev(plan.zk_zeta[z], f64), dev(plan.zk_lam[z], f64),
        dev(plan.zk_int[z], i64), dev(plan.zk_isint[z], i64), dev(plan.col_scale, f64),
    )  # fmt: skip
    # value groups: columns of one element pair with one radial part
    vgroups = _groups([(int(col_pair[c]), int(e[c])) for c in range(n_col)])
    v_lo, v_n, v_cols = _flatten(vgroups)
    v_pair = col_pair[v_cols[v_lo]] if vgroups else np.zeros(0, dtype=np.int64)
    gv = (
        dev(plan.p_ab[v_pair, 0], i64), dev(plan.p_ab[v_pair, 1], i64),
        dev(e[v_cols[v_lo]] if vgroups else [], i64), dev(v_lo, i64), dev(v_n, i64),
        dev(v_cols, i64),
    )  # fmt: skip
    # derivative groups: slots (f, g, column) of one (f, g) with one radial part
    rd, sl, n_radial = _slots(plan, n_el)
    s_f, s_g, s_col, s_k = (np.asarray(x, dtype=np.int64) for x in sl)
    dgroups = _groups([(int(s_f[s]), int(s_g[s]), int(e[s_col[s]])) for s in range(len(s_f))])
    d_lo, d_n, d_slots = _flatten(dgroups)
    first = d_slots[d_lo] if dgroups else np.zeros(0, dtype=np.int64)
    gd = (
        dev(s_f[first], i64), dev(s_g[first], i64), dev(e[s_col[first]], i64), dev(d_lo, i64),
        dev(d_n, i64), dev(s_col[d_slots], i64), dev(s_k[d_slots], i64),
    )  # fmt: skip
    own = s_col[s_f <= s_g]
    values_in_derivs = bool(np.array_equal(np.sort(own), np.arange(n_col)))
    widest = max([len(g) for g in vgroups + dgroups], default=1)
    kinds = 0
    for kind in plan.cut_kind:
        kinds |= 1 << int(kind)
    return Tables(
        kinds=kinds,
        cut=(dev(plan.cut_rc, f64), dev(plan.cut_kind, i64), dev(plan.cut_alpha, f64)),
        rk=(dev(rk_f, i64), dev(plan.rk_eta, f64), dev(plan.rk_rs, f64), dev(plan.rk_cut, i64)),
        n_rk=k_r,
        col=col,
        n_col=n_col,
        ek=(dev(plan.ek_eta, f64), dev(plan.ek_rs, f64), dev(plan.ek_cut, i64)),
        n_ek=int(plan.ek_eta.shape[0]),
        rd=tuple(dev(x, i64) for x in rd),
        n_rd=len(rd[0]),
        gv=gv,
        n_gv=len(vgroups),
        gd=gd,
        n_gd=len(dgroups),
        values_in_derivs=values_in_derivs,
        width=1 << (widest - 1).bit_length(),
        n_radial=n_radial,
        n_deriv=np.diff(plan.dsrc_off).astype(np.int64),
    )


_T = torch.Tensor


def neighbor_tables(
    vectors: torch.Tensor, distances: torch.Tensor, center: torch.Tensor, nbr: torch.Tensor,
    lo: int, hi: int, c_lo: int, n_c: int, n_el: int,
) -> tuple[_T, _T, _T, _T, _T, _T, int]:  # fmt: skip
    """Neighbour tables (n_el, M, n_c) of pairs [lo, hi) (centres c_lo + [0, n_c)): x, y, z,
    r, pair index (−1: padding), and counts (n_el, n_c)."""
    dev = vectors.device
    cen = center[lo:hi] - c_lo
    el = nbr[lo:hi]
    key = el * n_c + cen  # element-major: (f, c) segments
    order = torch.argsort(key, stable=True)
    counts = torch.bincount(key, minlength=n_el * n_c)  # (n_el * n_c,)
    starts = torch.cumsum(counts, 0) - counts
    ks = key[order]
    slot = torch.arange(hi - lo, device=dev) - starts[ks]
    m = int(counts.max()) if hi > lo else 0
    pidx = torch.full((n_el, max(m, 1), n_c), -1, dtype=torch.int64, device=dev)
    pidx[el[order], slot, cen[order]] = order + lo
    table = pidx.clamp_min(0)
    x, y, z = (vectors[:, a].to(torch.float64)[table] for a in range(3))
    r = distances.to(torch.float64)[table]
    return x, y, z, r, pidx, counts.view(n_el, n_c).to(torch.int32), m


def rank_within_value(values: torch.Tensor, n_values: int) -> torch.Tensor:
    """Each entry's rank among the entries of its value, in order: the row of each pair
    within its neighbour element's block. One stable sort and 1-D scans: a cumulative sum
    down a (P, n_el) one-hot table scans its outer dimension, which CUDA does slowly
    (docs/kernels.md)."""
    order = torch.sort(values, stable=True).indices
    counts = torch.bincount(values, minlength=n_values)
    first = torch.cumsum(counts, 0) - counts  # first sorted position of each value
    ranks = torch.empty_like(values)
    position = torch.arange(values.shape[0], device=values.device)
    ranks[order] = position - first[values[order]]
    return ranks
