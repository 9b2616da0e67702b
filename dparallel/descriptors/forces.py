"""Forces and virial from ∂E/∂G and stored per-pair ACSF derivatives (differentiable).

With s_ij = Σ_a ∂E/∂G_i,a · ∂G_i,a/∂r_ij (a 3-vector per pair),
∂E/∂r_j += s_ij and ∂E/∂r_i −= s_ij, so F = −∂E/∂r and Σ_k F_k = 0 exactly;
the virial is W = −Σ_pairs r_ij ⊗ s_ij (= −∂E/∂ε for a homogeneous strain ε).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dparallel.errors import DescriptorError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["forces_from_derivatives", "virial_from_derivatives"]


def _pair_gradients(dE_dG: Mapping[str, torch.Tensor], result: Mapping):  # noqa: ANN202
    """Yield (pair_first, pair_second, vectors, s) per (centre, neighbour) element group."""
    for e, res in result.items():
        if res.pairs is None:
            raise DescriptorError(
                f"result for element {e!r} has no derivatives; call compute(derivatives=True)"
            )
        if e not in dE_dG:
            continue
        g_all = dE_dG[e]  # (n_e, F_e)
        if g_all.shape[0] != res.values.shape[0]:
            raise DescriptorError(
                f"dE_dG[{e!r}] has {g_all.shape[0]} rows, expected {res.values.shape[0]}"
            )
        for pd in res.pairs.values():
            if pd.feature_index.numel() == 0 or pd.pair_first.numel() == 0:
                continue
            # columns first, on the n_e rows: then one (P, F) gather by centre, not a (P, F_e)
            # one cut down (the same values; its backward sums into (n_e, F), not (P, F_e))
            g = g_all.index_select(1, pd.feature_index).index_select(0, pd.center)  # (P, F)
            s = torch.einsum("pf,pfc->pc", g.to(pd.dG_dr.dtype), pd.dG_dr)  # (P, 3)
            yield pd.pair_first, pd.pair_second, pd.vectors, s


def forces_from_derivatives(
    dE_dG: Mapping[str, torch.Tensor], result: Mapping, n_atoms: int
) -> torch.Tensor:
    """Forces F_k = −Σ_i ∂E/∂G_i · ∂G_i/∂r_k (n_atoms, 3), eV/Å, from ``dE_dG`` (element →
    (n_e, F_e), rows as that element's ``DescriptorResult.values``) and ``result`` (a
    ``compute(..., derivatives=True)`` or the same fields read back from a store)."""
    dtype = next(iter(dE_dG.values())).dtype if dE_dG else torch.float64
    grad = None
    for first, second, _, s in _pair_gradients(dE_dG, result):
        if grad is None:
            grad = torch.zeros(n_atoms, 3, dtype=s.dtype, device=s.device)
        grad = grad.index_add(0, second, s).index_add(0, first, -s)
    if grad is None:
        return torch.zeros(n_atoms, 3, dtype=dtype)
    return -grad


def virial_from_derivatives(
    dE_dG: Mapping[str, torch.Tensor],
    result: Mapping,
    structure_index: torch.Tensor | None = None,
    n_structures: int = 1,
) -> torch.Tensor:
    """Virial W = −Σ_ij r_ij ⊗ ∂E/∂r_ij (n_structures, 3, 3), eV (stress = −W / volume), per
    structure of ``structure_index`` (N,) (without it, every pair counts to structure 0)."""
    out = None
    for first, _, vec, s in _pair_gradients(dE_dG, result):
        w = -vec.to(s.dtype).unsqueeze(2) * s.unsqueeze(1)  # (P, 3, 3)
        if out is None:
            out = torch.zeros(n_structures, 3, 3, dtype=s.dtype, device=s.device)
        idx = (
            structure_index.index_select(0, first)
            if structure_index is not None
            else torch.zeros_like(first)
        )
        out = out.index_add(0, idx, w)
    if out is None:
        return torch.zeros(n_structures, 3, 3, dtype=torch.float64)
    return out
