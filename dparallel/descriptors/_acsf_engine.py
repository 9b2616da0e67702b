"""Vectorised evaluation of one central element's symmetry functions (values + derivatives).

Private engine behind :meth:`dparallel.descriptors.ACSF.compute`; see docs/acsf.md.
Triplets (i, j, k), j < k, are built per block of at most ``max_triplets`` triplets,
so peak memory is O(max_triplets · K_a) plus O(P_e · n_el · K_a) for derivatives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from dparallel.kernels.acsf_plan import build_kernel_plan

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from dparallel.kernels.acsf_numba import KernelPlan

__all__ = ["ElementPlan", "derivative_groups", "evaluate_element", "numba_element"]


@dataclass
class ElementPlan:
    """Column bookkeeping for one central element (built once from feature metadata)."""

    n_features: int
    r_max: float
    # radial columns: unique (eta, rs, rc, kind, alpha)
    rad_keys: list[tuple[float, float, float, int, float]] = field(default_factory=list)
    # angular radial-part keys, narrow first: (narrow, eta, rs, rc, kind, alpha)
    e_keys: list[tuple[bool, float, float, float, int, float]] = field(default_factory=list)
    n_narrow_keys: int = 0
    z_keys: list[tuple[float, float]] = field(default_factory=list)  # (zeta, lambda)
    ang_cols: list[tuple[int, int]] = field(default_factory=list)  # (e_key, z_key) per column
    outer: bool = False  # ang_cols is the full e-major product e_keys × z_keys
    # value source index: features gathered from cat([rad (n_el*K_r), ang (n_pt*K_a)])
    value_source: list[int] = field(default_factory=list)
    # derivative groups per neighbour element f: (feature positions, source columns)
    # source columns index cat([rad (K_r), ang slots (n_el*K_a)])
    deriv_groups: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)
    kernel: KernelPlan | None = None  # tables of the compiled (numba) kernel


def build_plan(features: list[dict], elements: list[str]) -> ElementPlan:
    """Column bookkeeping for a list of feature dicts of one central element."""
    n_el = len(elements)
    index = {e: n for n, e in enumerate(elements)}
    pt_of = _pair_table(n_el)
    rad_keys: list = []
    e_keys_n: list = []
    e_keys_w: list = []
    z_keys: list = []
    rad_of: list = []
    ang_raw: list = []
    for f in features:
        cut = (float(f["rc"]), int(f["cutoff_id"]), float(f["alpha"]))
        if f["type"] == 2:
            key = (float(f["eta"]), float(f["rs"]), *cut)
            if key not in rad_keys:
                rad_keys.append(key)
            rad_of.append((index[f["neighbors"][0]], rad_keys.index(key)))
            ang_raw.append(None)
        else:
            narrow = f["type"] == 3
            ek = (narrow, float(f["eta"]), float(f["rs"]), *cut)
            bucket = e_keys_n if narrow else e_keys_w
            if ek not in bucket:
                bucket.append(ek)
            zk = (float(f["zeta"]), float(f["lambda"]))
            if zk not in z_keys:
                z_keys.append(zk)
            a, b = index[f["neighbors"][0]], index[f["neighbors"][1]]
            rad_of.append(None)
            ang_raw.append((a, b, ek, zk))
    e_keys = e_keys_n + e_keys_w
    ang_cols: list = []
    for item in ang_raw:
        if item is not None:
            col = (e_keys.index(item[2]), z_keys.index(item[3]))
            if col not in ang_cols:
                ang_cols.append(col)
    outer = len(e_keys) * len(z_keys) <= 2 * len(ang_cols)
    if outer:  # every (radial part, angular part) combination, e-major: no column gathers
        ang_cols = [(a, b) for a in range(len(e_keys)) for b in range(len(z_keys))]
    k_r, k_a = len(rad_keys), len(ang_cols)
    value_source: list[int] = []
    groups: dict[int, tuple[list[int], list[int]]] = {g: ([], []) for g in range(n_el)}
    for pos, (rad, ang) in enumerate(zip(rad_of, ang_raw, strict=True)):
        if rad is not None:
            fe, kcol = rad
            value_source.append(fe * k_r + kcol)
            groups[fe][0].append(pos)
            groups[fe][1].append(kcol)
        else:
            a, b, ek, zk = ang
            column = ang_cols.index((e_keys.index(ek), z_keys.index(zk)))
            value_source.append(n_el * k_r + int(pt_of[a][b]) * k_a + column)
            # pair with neighbour a sees partner b in slot b, and vice versa
            for me, partner in ((a, b), (b, a)) if a != b else ((a, b),):
                groups[me][0].append(pos)
                groups[me][1].append(k_r + partner * k_a + column)
    for g in groups:  # order each group by feature position
        pairs = sorted(zip(*groups[g], strict=True)) if groups[g][0] else []
        groups[g] = ([p for p, _ in pairs], [c for _, c in pairs])
    r_max = max([float(f["rc"]) for f in features], default=0.0)
    return ElementPlan(
        n_features=len(features),
        r_max=r_max,
        rad_keys=rad_keys,
        e_keys=e_keys,
        n_narrow_keys=len(e_keys_n),
        z_keys=z_keys,
        ang_cols=ang_cols,
        outer=outer,
        value_source=value_source,
        deriv_groups={g: v for g, v in groups.items() if v[0]},
        kernel=build_kernel_plan(features, elements),
    )


def _pair_table(n_el: int) -> list[list[int]]:
    """Index of the unordered element pair (a, b), a ≤ b enumerated a-major."""
    table = [[0] * n_el for _ in range(n_el)]
    n = 0
    for a in range(n_el):
        for b in range(a, n_el):
            table[a][b] = table[b][a] = n
            n += 1
    return table


def evaluate_element(
    plan: ElementPlan,
    vectors: torch.Tensor,
    distances: torch.Tensor,
    center: torch.Tensor,
    neighbor_el: torch.Tensor,
    n_centers: int,
    n_el: int,
    derivatives: bool,
    max_triplets: int,
    backend: str = "torch",
    compute_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, dict[int, tuple[torch.Tensor, torch.Tensor]] | None]:
    """Values and per-pair derivatives of one central element's features.

    Parameters
    ----------
    vectors, distances
        (P_e, 3), (P_e,) pair vectors r_ij and |r_ij|, pairs sorted by ``center``,
        already restricted to r < plan.r_max and to centres of this element.
    center
        (P_e,) local centre row in [0, n_centers).
    neighbor_el
        (P_e,) element index of the neighbour j.

    Returns
    -------
    values
        (n_centers, F_e).
    groups
        If ``derivatives``: {f: (pair selector (P_ef,) int64 into the P_e pairs,
        dG_dr (P_ef, F_ef, 3))}, columns as ``plan.deriv_groups[f][0]``; else None.
    """
    if backend == "numba":
        return _evaluate_numba(
            plan, vectors, distances, center, neighbor_el, n_centers, n_el, derivatives,
            compute_dtype,
        )  # fmt: skip
    import torch  # the torch backend (the compiled one needs none: the featurize workers)

    from dparallel.kernels.acsf_terms import (
        angular_factor,
        gaussian_cutoff,
        triplet_blocks,
        triplet_counts,
        triplets,
    )

    dtype, dev = vectors.dtype, vectors.device
    n_pairs = distances.shape[0]
    n_pt = n_el * (n_el + 1) // 2
    k_r, k_a = len(plan.rad_keys), len(plan.ang_cols)
    r = distances
    # ---------------------------------------------------------------- radial
    rk = plan.rad_keys
    a_r, da_r = gaussian_cutoff(
        r, [k[0] for k in rk], [k[1] for k in rk], [k[2:] for k in rk], derivative=derivatives
    )  # (P_e, K_r)
    rad_acc = torch.zeros(n_centers * n_el, k_r, dtype=dtype, device=dev).index_add(
        0, center * n_el + neighbor_el, a_r
    )  # (n_e * n_el, K_r)
    unit = vectors / r.unsqueeze(1)  # (P_e, 3)
    # --------------------------------------------------------------- angular
    ang_acc = torch.zeros(n_centers * n_pt, k_a, dtype=dtype, device=dev)
    ang_der = (
        torch.zeros(n_pairs * n_el, k_a, 3, dtype=dtype, device=dev)
        if derivatives and k_a
        else None
    )  # (P_e * n_el, K_a, 3): pair p, partner element slot, column
    if k_a and n_pairs:
        ek = plan.e_keys
        a_p, da_p = gaussian_cutoff(
            r, [k[1] for k in ek], [k[2] for k in ek], [k[3:] for k in ek], derivative=derivatives
        )  # (P_e, n_E)
        nn = plan.n_narrow_keys
        ecol = torch.tensor([c[0] for c in plan.ang_cols], device=dev)
        zcol = torch.tensor([c[1] for c in plan.ang_cols], device=dev)

        def comb(zl: torch.Tensor, el: torch.Tensor) -> torch.Tensor:
            """(T, K_a) column products zl[:, z(col)] * el[:, e(col)]."""
            if plan.outer:
                return (el.unsqueeze(2) * zl.unsqueeze(1)).reshape(el.shape[0], -1)
            return el.index_select(1, ecol) * zl.index_select(1, zcol)

        pt = torch.tensor(_pair_table(n_el), device=dev)  # (n_el, n_el)
        counts = triplet_counts(center, n_centers)
        if derivatives:
            coef_p = torch.zeros(n_pairs * n_el, k_a, dtype=dtype, device=dev)
        for start, stop in triplet_blocks(counts, max_triplets):
            tj, tk = triplets(counts, start, stop)  # (T,), (T,)
            if tj.numel() == 0:
                continue
            uj, uk = unit[tj], unit[tk]  # (T, 3)
            c = (uj * uk).sum(1)  # (T,) cos θ_jik
            rj, rk2 = r[tj], r[tk]
            aj, ak = a_p[tj], a_p[tk]  # (T, n_E)
            prod = aj * ak
            if nn:
                rjk = (rj * rj + rk2 * rk2 - 2.0 * rj * rk2 * c).clamp_min(0.0).sqrt()  # (T,)
                nk = ek[:nn]
                b, db = gaussian_cutoff(
                    rjk,
                    [k[1] for k in nk],
                    [k[2] for k in nk],
                    [k[3:] for k in nk],
                    derivative=derivatives,
                )  # (T, n_narrow)
                full = torch.cat([prod[:, :nn] * b, prod[:, nn:]], 1) if nn < len(ek) else prod * b
            else:
                full = prod
            zk = plan.z_keys
            zv, dz = angular_factor(
                c, [z[0] for z in zk], [z[1] for z in zk], derivative=derivatives
            )  # (T, n_Z)
            el_j, el_k = neighbor_el[tj], neighbor_el[tk]
            ang_acc = ang_acc.index_add(0, center[tj] * n_pt + pt[el_j, el_k], comb(zv, full))
            if not derivatives:
                continue
            assert dz is not None and da_p is not None and ang_der is not None
            # dG/dv_j = Pj u_j + Qj u_k,  dG/dv_k = Pk u_k + Qk u_j  (see docs/acsf.md)
            inv_j, inv_k = (1.0 / rj).unsqueeze(1), (1.0 / rk2).unsqueeze(1)  # (T, 1)
            xj, xk = da_p[tj] * ak, aj * da_p[tk]  # (T, n_E)
            if nn:
                assert db is not None
                pad = (0, len(ek) - nn)
                bfull = torch.nn.functional.pad(b, pad, value=1.0)
                xj, xk = xj * bfull, xk * bfull
                g = torch.nn.functional.pad(prod[:, :nn] * db, pad)  # (T, n_E) Aj Ak dB
                inv_jk = (1.0 / rjk).unsqueeze(1)
                gj, gk = g * (rj.unsqueeze(1) * inv_jk), g * (rk2.unsqueeze(1) * inv_jk)
                xj, xk = xj + gj, xk + gk
            cc = c.unsqueeze(1)
            pj = comb(zv, xj) - comb(dz, full * (cc * inv_j))  # (T, K_a)
            pk = comb(zv, xk) - comb(dz, full * (cc * inv_k))
            qj = comb(dz, full * inv_j)
            qk = comb(dz, full * inv_k)
            if nn:
                qj = qj - comb(zv, gk)
                qk = qk - comb(zv, gj)
            slot_j, slot_k = tj * n_el + el_k, tk * n_el + el_j
            coef_p = coef_p.index_add(0, slot_j, pj).index_add(0, slot_k, pk)
            ang_der = ang_der.index_add(0, slot_j, qj.unsqueeze(2) * uk.unsqueeze(1)).index_add(
                0, slot_k, qk.unsqueeze(2) * uj.unsqueeze(1)
            )  # (P_e * n_el, K_a, 3)
        if derivatives:
            assert ang_der is not None
            u_rep = unit.repeat_interleave(n_el, 0).unsqueeze(1)  # (P_e * n_el, 1, 3)
            ang_der = ang_der + coef_p.unsqueeze(2) * u_rep
    src = torch.cat([rad_acc.view(n_centers, n_el * k_r), ang_acc.view(n_centers, n_pt * k_a)], 1)
    values = src.index_select(1, torch.tensor(plan.value_source, dtype=torch.long, device=dev))
    if not derivatives:
        return values, None
    assert da_r is not None
    ang = ang_der.view(n_pairs, n_el * k_a, 3) if ang_der is not None else None
    groups = {}
    for f, (_, cols) in plan.deriv_groups.items():
        mask = neighbor_el == f
        every = bool(mask.all())
        sel = torch.arange(n_pairs, device=dev) if every else torch.nonzero(mask).squeeze(1)
        u = unit if every else unit.index_select(0, sel)
        dr = da_r if every else da_r.index_select(0, sel)
        rad_cols = [c for c in cols if c < k_r]  # cols follow feature order
        ang_cols = [c - k_r for c in cols if c >= k_r]
        parts = []
        if rad_cols:
            dr = dr if rad_cols == list(range(k_r)) else dr[:, rad_cols]
            parts.append(dr.unsqueeze(2) * u.unsqueeze(1))  # (P_ef, F_rad, 3)
        if ang_cols:
            assert ang is not None
            a = ang if every else ang.index_select(0, sel)
            if ang_cols != list(range(n_el * k_a)):
                a = a[:, ang_cols]
            parts.append(a)
        dg = parts[0] if len(parts) == 1 else torch.cat(parts, 1)  # (P_ef, F_ef, 3)
        order = sorted(range(len(cols)), key=lambda n: (cols[n] >= k_r, n))
        if order != list(range(len(cols))):  # back from [radial | angular] to feature order
            dg = dg[:, torch.argsort(torch.tensor(order))]
        groups[f] = (sel, dg)
    return values, groups


def _evaluate_numba(
    plan: ElementPlan,
    vectors: torch.Tensor,
    distances: torch.Tensor,
    center: torch.Tensor,
    neighbor_el: torch.Tensor,
    n_centers: int,
    n_el: int,
    derivatives: bool,
    compute_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, dict[int, tuple[torch.Tensor, torch.Tensor]] | None]:
    """:func:`evaluate_element` through the compiled kernel (:func:`numba_element`)."""
    import torch

    values, groups = numba_element(
        plan,
        vectors.detach().numpy(),
        distances.detach().numpy(),
        center.numpy(),
        neighbor_el.numpy(),
        n_centers,
        n_el,
        derivatives,
        np.float64 if vectors.dtype == torch.float64 else np.float32,
        compute_dtype == torch.float32,
    )
    if groups is None:
        return torch.from_numpy(values), None
    out = {f: (torch.from_numpy(sel), torch.from_numpy(dg)) for f, (sel, dg) in groups.items()}
    return torch.from_numpy(values), out


class SplitDerivatives(NamedTuple):
    """dG/dr of one neighbour element's pairs in the store's split layout (P pairs)."""

    radial: np.ndarray  # (F,) bool: column is radial, ∂G/∂r_ij = s · r̂_ij
    # (F_r + 3 F_a, P): s of the radial columns, then the other columns' ∂G/∂r_ij as
    # x, y, z rows per column (one array, as the store keeps it)
    dG_dr_split: np.ndarray


def numba_element(
    plan: ElementPlan,
    vectors: np.ndarray,
    distances: np.ndarray,
    center: np.ndarray,
    neighbor_el: np.ndarray,
    n_centers: int,
    n_el: int,
    derivatives: bool,
    dtype: type = np.float64,
    float32_terms: bool = False,
    derivative_dtype: type | None = None,
    split: bool = False,
) -> tuple[np.ndarray, dict[int, tuple[np.ndarray, Any]] | None]:
    """The compiled kernel on numpy arrays (arguments and results as :func:`evaluate_element`).

    Triplet terms in float32 when ``float32_terms`` (twice the vector width), every sum
    and per-pair quantity in float64; outputs in ``dtype``, dG/dr in ``derivative_dtype``
    (default ``dtype``; computed in float64 either way, rounded once when written).
    ``split``: each group's dG/dr as :class:`SplitDerivatives` instead of (P_f, F_f, 3).
    """
    from dparallel.kernels.acsf_numba import (
        acsf_element,
        no_network,
        no_split,
        split_layout,
    )

    kplan = plan.kernel
    assert kplan is not None
    vec = np.ascontiguousarray(vectors, dtype=np.float64)  # (P_e, 3)
    dist = np.ascontiguousarray(distances, dtype=np.float64)  # (P_e,)
    nbr = neighbor_el.astype(np.int64, copy=False)
    seg = np.zeros(n_centers + 1, dtype=np.int64)
    np.cumsum(np.bincount(center, minlength=n_centers), out=seg[1:])
    values: np.ndarray = np.zeros((n_centers, plan.n_features), dtype=dtype)
    grp_row = np.zeros(nbr.shape[0], dtype=np.int64)
    d_base = np.zeros(n_el, dtype=np.int64)
    n_pairs = np.zeros(n_el, dtype=np.int64)
    sels: dict[int, np.ndarray] = {}
    if derivatives:
        for f in range(n_el):
            if kplan.dsrc_off[f + 1] == kplan.dsrc_off[f]:
                continue
            sel = np.flatnonzero(nbr == f) if n_el > 1 else np.arange(nbr.shape[0])
            grp_row[sel] = np.arange(sel.shape[0])
            sels[f] = sel
            n_pairs[f] = sel.shape[0]
    layout = split_layout(kplan, n_pairs) if split and derivatives else no_split()
    total = 0
    n_rows: dict[int, int] = {}  # numbers per pair of each block: F_r + 3 F_a (3 F unsplit)
    for f in sels:
        width = int(kplan.dsrc_off[f + 1] - kplan.dsrc_off[f])
        n_radial = int(layout.n_radial[f]) if layout.on else 0
        n_rows[f] = n_radial + 3 * (width - n_radial)
        d_base[f] = total
        total += n_pairs[f] * n_rows[f]
    dflat: np.ndarray = np.empty(total, dtype=derivative_dtype or dtype)
    work = np.empty(0, dtype=np.float32 if float32_terms else np.float64)
    acsf_element(
        kplan, vec, dist, seg, nbr, grp_row, d_base, values, dflat, derivatives, work,
        no_network(), layout,
    )  # fmt: skip
    if not derivatives:
        return values, None
    groups = derivative_groups(
        kplan, sels, d_base, n_rows, dflat, layout.on,
        lambda sel, block, radial: block.reshape(sel.shape[0], radial.shape[0], 3),
    )  # fmt: skip
    return values, groups


def derivative_groups(
    kplan: KernelPlan,
    selections: dict[int, Any],
    d_base: np.ndarray,
    n_rows: Any,
    dflat: Any,
    split: bool,
    unsplit: Callable[[Any, Any, np.ndarray], Any],
) -> dict[int, tuple[Any, Any]]:
    """``{f: (sel, dG/dr)}`` from a kernel's flat derivative output (numpy or torch).

    ``dflat`` holds, per neighbour element f with pairs ``selections[f]``, a block at
    ``d_base[f]`` of ``n_rows[f]`` numbers per pair, viewed (no copy) as (rows, P_f). With
    ``split`` each group is a :class:`SplitDerivatives` of the block; else
    ``unsplit(sel, block, radial)``, given the group's radial columns (F_f,) bool, gives
    its dG/dr.
    """
    from dparallel.kernels.acsf_layout import radial_columns

    radial = radial_columns(kplan)  # (Σ F_f,)
    groups: dict[int, tuple[Any, Any]] = {}
    for f, sel in selections.items():
        lo, hi = int(kplan.dsrc_off[f]), int(kplan.dsrc_off[f + 1])
        n_p, base, rows = int(sel.shape[0]), int(d_base[f]), int(n_rows[f])
        block = dflat[base : base + rows * n_p].reshape(rows, n_p)  # no copy
        if split:
            groups[f] = (sel, SplitDerivatives(radial[lo:hi], block))
        else:
            groups[f] = (sel, unsplit(sel, block, radial[lo:hi]))
    return groups
