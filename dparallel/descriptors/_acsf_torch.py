"""The torch ACSF backend: the vectorised, differentiable element kernel that the others are
tested against. Triplets (j < k) are built per block of at most ``max_triplets``, so peak
memory is O(max_triplets · K_a) plus O(P_e · n_el · K_a) for derivatives (docs/acsf.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from dparallel.kernels.acsf_plan import pair_table

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from dparallel.descriptors._acsf_engine import ElementPlan, KernelCall
    from dparallel.kernels.pair_select import ElementPairs

__all__ = ["torch_element"]


def torch_element(
    plan: ElementPlan, pairs: ElementPairs, n_centers: int, call: KernelCall
) -> tuple[torch.Tensor, dict[int, tuple[torch.Tensor, torch.Tensor]] | None]:
    """Values (n_centers, F_e) and, with ``call.derivatives``, ``{f: (pair selector
    (P_ef,), dG_dr (P_ef, F_ef, 3))}`` (columns ``plan.deriv_groups[f][0]``) of one central
    element, from tensor ``pairs`` sorted by centre (the element kernels' contract)."""
    import torch  # the torch backend (the compiled one needs none: the featurize workers)

    from dparallel.kernels.acsf_terms import gaussian_cutoff

    _, center, neighbor_el, vectors, r = pairs
    dtype, dev, derivatives, n_el = vectors.dtype, vectors.device, call.derivatives, plan.n_el
    n_pt = n_el * (n_el + 1) // 2
    k_r, k_a = len(plan.rad_keys), len(plan.ang_cols)
    rk = plan.rad_keys
    a_r, da_r = gaussian_cutoff(
        r, [k[0] for k in rk], [k[1] for k in rk], [k[2:] for k in rk], derivative=derivatives
    )  # (P_e, K_r)
    rad_acc = torch.zeros(n_centers * n_el, k_r, dtype=dtype, device=dev).index_add(
        0, center * n_el + neighbor_el, a_r
    )  # (n_e * n_el, K_r)
    unit = vectors / r.unsqueeze(1)  # (P_e, 3)
    ang = _Angular(plan, r, unit, center, neighbor_el, n_centers, derivatives)
    ang_acc, ang_der = _angular(ang, call.backend.max_triplets)
    src = torch.cat([rad_acc.view(n_centers, n_el * k_r), ang_acc.view(n_centers, n_pt * k_a)], 1)
    values = src.index_select(1, torch.tensor(plan.value_source, dtype=torch.long, device=dev))
    if not derivatives:
        return values, None
    assert da_r is not None
    return values, _torch_groups(plan, neighbor_el, unit, da_r, ang_der)


class _Angular(NamedTuple):
    """One central element's pairs as the angular terms use them."""

    plan: ElementPlan
    r: torch.Tensor  # (P_e,)
    unit: torch.Tensor  # (P_e, 3)
    center: torch.Tensor  # (P_e,)
    neighbor_el: torch.Tensor  # (P_e,)
    n_centers: int
    derivatives: bool


def _angular(ang: _Angular, max_triplets: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Angular sums (n_e * n_pt, K_a) and, with derivatives, per pair and partner slot
    (P_e * n_el, K_a, 3), accumulated over triplet blocks."""
    import torch

    from dparallel.kernels.acsf_terms import gaussian_cutoff, triplet_blocks, triplet_counts

    plan, r, dev = ang.plan, ang.r, ang.r.device
    dtype, n_el, n_pairs = r.dtype, plan.n_el, r.shape[0]
    n_pt, k_a = n_el * (n_el + 1) // 2, len(plan.ang_cols)
    ang_acc = torch.zeros(ang.n_centers * n_pt, k_a, dtype=dtype, device=dev)
    ang_der = (
        torch.zeros(n_pairs * n_el, k_a, 3, dtype=dtype, device=dev)
        if ang.derivatives and k_a
        else None
    )  # (P_e * n_el, K_a, 3): pair p, partner element slot, column
    if not (k_a and n_pairs):
        return ang_acc, ang_der
    ek = plan.e_keys
    a_p, da_p = gaussian_cutoff(
        r, [k[1] for k in ek], [k[2] for k in ek], [k[3:] for k in ek], derivative=ang.derivatives
    )  # (P_e, n_E)
    comb = _combiner(plan, dev)
    pt = torch.tensor(pair_table(n_el), device=dev)  # (n_el, n_el)
    counts = triplet_counts(ang.center, ang.n_centers)
    coef_p = torch.zeros(n_pairs * n_el, k_a, dtype=dtype, device=dev) if ang.derivatives else None
    for start, stop in triplet_blocks(counts, max_triplets):
        block = _triplet_terms(ang, counts, start, stop, a_p)
        if block is None:
            continue
        tj, tk, zv, full, _, _ = block
        el_j, el_k = ang.neighbor_el[tj], ang.neighbor_el[tk]
        ang_acc = ang_acc.index_add(0, ang.center[tj] * n_pt + pt[el_j, el_k], comb(zv, full))
        if not ang.derivatives:
            continue
        assert da_p is not None and ang_der is not None and coef_p is not None
        slot_j, slot_k = tj * n_el + el_k, tk * n_el + el_j
        pj, pk, qj, qk = _triplet_derivatives(ang, block, a_p, da_p, comb)
        coef_p = coef_p.index_add(0, slot_j, pj).index_add(0, slot_k, pk)
        ang_der = ang_der.index_add(
            0, slot_j, qj.unsqueeze(2) * ang.unit[tk].unsqueeze(1)
        ).index_add(0, slot_k, qk.unsqueeze(2) * ang.unit[tj].unsqueeze(1))  # (P_e * n_el, K_a, 3)
    if ang.derivatives:
        assert ang_der is not None and coef_p is not None
        u_rep = ang.unit.repeat_interleave(n_el, 0).unsqueeze(1)  # (P_e * n_el, 1, 3)
        ang_der = ang_der + coef_p.unsqueeze(2) * u_rep
    return ang_acc, ang_der


def _combiner(plan: ElementPlan, dev: torch.device) -> Callable[[Any, Any], Any]:
    """``comb(zl, el)``: (T, K_a) column products zl[:, z(col)] * el[:, e(col)]."""
    import torch

    ecol = torch.tensor([c[0] for c in plan.ang_cols], device=dev)
    zcol = torch.tensor([c[1] for c in plan.ang_cols], device=dev)

    def comb(zl: torch.Tensor, el: torch.Tensor) -> torch.Tensor:
        if plan.outer:
            return (el.unsqueeze(2) * zl.unsqueeze(1)).reshape(el.shape[0], -1)
        return el.index_select(1, ecol) * zl.index_select(1, zcol)

    return comb


class _Block(NamedTuple):
    """One block of triplets (i, j, k), j < k, and its terms."""

    tj: torch.Tensor  # (T,) pair index of j
    tk: torch.Tensor  # (T,) pair index of k
    zv: torch.Tensor  # (T, n_Z) angular factors
    full: torch.Tensor  # (T, n_E) radial parts (narrow ones times the r_jk term)
    c: torch.Tensor  # (T,) cos θ_jik
    extra: tuple[Any, ...]  # (dz, b, db, rjk, aj · ak) for the derivatives


def _triplet_terms(
    ang: _Angular, counts: torch.Tensor, start: int, stop: int, a_p: torch.Tensor
) -> _Block | None:
    """The terms of triplet block [start, stop); None when it is empty."""
    import torch

    from dparallel.kernels.acsf_terms import angular_factor, gaussian_cutoff, triplets

    tj, tk = triplets(counts, start, stop)  # (T,), (T,)
    if tj.numel() == 0:
        return None
    plan, r, derivatives = ang.plan, ang.r, ang.derivatives
    ek, nn = plan.e_keys, plan.n_narrow_keys
    uj, uk = ang.unit[tj], ang.unit[tk]  # (T, 3)
    c = (uj * uk).sum(1)  # (T,) cos θ_jik
    rj, rk2 = r[tj], r[tk]
    aj, ak = a_p[tj], a_p[tk]  # (T, n_E)
    prod = aj * ak
    b = db = rjk = None
    if nn:
        rjk = (rj * rj + rk2 * rk2 - 2.0 * rj * rk2 * c).clamp_min(0.0).sqrt()  # (T,)
        nk = ek[:nn]
        b, db = gaussian_cutoff(
            rjk, [k[1] for k in nk], [k[2] for k in nk], [k[3:] for k in nk], derivative=derivatives
        )  # (T, n_narrow)
        full = torch.cat([prod[:, :nn] * b, prod[:, nn:]], 1) if nn < len(ek) else prod * b
    else:
        full = prod
    zk = plan.z_keys
    zv, dz = angular_factor(
        c, [z[0] for z in zk], [z[1] for z in zk], derivative=derivatives
    )  # (T, n_Z)
    return _Block(tj, tk, zv, full, c, (dz, b, db, rjk, prod))


def _triplet_derivatives(
    ang: _Angular,
    block: _Block,
    a_p: torch.Tensor,
    da_p: torch.Tensor,
    comb: Callable[[Any, Any], Any],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(Pj, Pk, Qj, Qk), each (T, K_a): dG/dv_j = Pj u_j + Qj u_k, dG/dv_k = Pk u_k + Qk u_j
    (see docs/acsf.md)."""
    import torch

    tj, tk, zv, full, c, (dz, b, db, rjk, prod) = block
    assert dz is not None
    r, ek, nn = ang.r, ang.plan.e_keys, ang.plan.n_narrow_keys
    rj, rk2 = r[tj], r[tk]
    aj, ak = a_p[tj], a_p[tk]  # (T, n_E)
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
    return pj, pk, qj, qk


def _torch_groups(
    plan: ElementPlan,
    neighbor_el: torch.Tensor,
    unit: torch.Tensor,
    da_r: torch.Tensor,
    ang_der: torch.Tensor | None,
) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """``{f: (pair selector, dG/dr (P_ef, F_ef, 3))}`` in feature order, from the radial
    derivatives (P_e, K_r) and the angular ones per partner slot."""
    import torch

    n_pairs, n_el = unit.shape[0], plan.n_el
    k_r, k_a, dev = len(plan.rad_keys), len(plan.ang_cols), unit.device
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
    return groups
