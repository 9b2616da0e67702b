"""Forces and virial of the fused ACSF kernel: ∂E/∂G contracted with one centre's
derivative terms (stored triplet terms, separable accumulators, radial factors) and
scattered onto its atoms."""

from __future__ import annotations

from dparallel.kernels._numba_jit import CONTRACT, jit_views
from dparallel.kernels.acsf_angular_numba import _PJ, _PK, _QV, _scatter

__all__: list[str] = []


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


_contract = jit_views(CONTRACT)(_contract)
_triplet_forces = jit_views(CONTRACT)(_triplet_forces)
