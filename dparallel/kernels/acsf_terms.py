"""Building blocks of n2p2 symmetry functions as pure, differentiable torch functions:
radial factors, angular factors, and the triplets (j < k) of a pair list sorted by centre.
"""

from __future__ import annotations

import itertools

import torch

from dparallel.kernels.cutoffs import cutoff_fn_and_derivative

__all__ = ["angular_factor", "gaussian_cutoff", "triplet_blocks", "triplet_counts", "triplets"]


def gaussian_cutoff(
    r: torch.Tensor,
    eta: list[float],
    rs: list[float],
    cutoffs: list[tuple[float, int, float]],
    derivative: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """a_k(r) = exp(−η_k (r − rs_k)²)·f_c(r; rc_k, type_k, α_k) (M, K) of distances ``r``
    (M,) for K columns (``cutoffs``: (rc, n2p2 type, α) each, equal ones evaluated once),
    and da/dr (M, K) if ``derivative`` (else None)."""
    if not eta:
        z = r.new_zeros((r.shape[0], 0))
        return z, (z if derivative else None)
    uniq = sorted(set(cutoffs))
    fcs, dfcs = zip(*(cutoff_fn_and_derivative(r, *c) for c in uniq), strict=True)

    def columns(per_cutoff: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """(M, K), or (M, 1) broadcast over the K columns where they share one cutoff."""
        if len(uniq) == 1:
            return per_cutoff[0].unsqueeze(1)
        idx = torch.tensor([uniq.index(c) for c in cutoffs], device=r.device)
        return torch.stack(per_cutoff, 1).index_select(1, idx)

    fc_k = columns(fcs)
    eta_t = torch.tensor(eta, dtype=r.dtype, device=r.device)
    d = r.unsqueeze(1) - torch.tensor(rs, dtype=r.dtype, device=r.device)  # (M, K)
    g = torch.exp(-eta_t * d * d)
    if not derivative:
        return g * fc_k, None
    return g * fc_k, g * (columns(dfcs) - 2.0 * eta_t * d * fc_k)


def angular_factor(
    c: torch.Tensor, zeta: list[float], lambda_: list[float], derivative: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Z_k(c) = 2^(1−ζ_k)(1 + λ_k c)^ζ_k (T, K) of c = cos θ_jik (T,), and dZ/dc (T, K) if
    ``derivative``: as n2p2, any real ζ and λ, and 0 (value and derivative) where
    1 + λc ≤ 0; integer ζ in [1, 64] by repeated multiplication, others by ``pow``."""
    cols, dcols = [], []
    for z, lam in zip(zeta, lambda_, strict=True):
        base = 1.0 + lam * c
        pre = 2.0 ** (1.0 - z)
        zi = round(z)
        if abs(z - zi) < 1e-12 and 1 <= zi <= 64:
            pm1 = _int_pow(base, zi - 1)  # base^(ζ−1)
            val = pm1 * base
        else:
            safe = torch.where(base > 0.0, base, torch.ones_like(base))  # no inf/NaN at ≤ 0
            pm1 = safe.pow(z - 1.0)
            val = pm1 * safe
        if lam != 0.0:  # base ≤ 0 is only possible for λ ≠ 0
            keep = base > 0.0
            zero = torch.zeros_like(base)
            val = torch.where(keep, val, zero)
            pm1 = torch.where(keep, pm1, zero)
        cols.append(pre * val)
        if derivative:
            dcols.append((pre * z * lam) * pm1)
    if not cols:
        e = c.new_zeros((c.shape[0], 0))
        return e, (e if derivative else None)
    out = torch.stack(cols, 1)
    return out, (torch.stack(dcols, 1) if derivative else None)


def _int_pow(x: torch.Tensor, n: int) -> torch.Tensor:
    """x**n for a small non-negative integer n by squaring."""
    if n == 0:
        return torch.ones_like(x)
    result: torch.Tensor | None = None
    base = x
    while n:
        if n & 1:
            result = base if result is None else result * base
        n >>= 1
        if n:
            base = base * base
    assert result is not None
    return result


def triplet_counts(center: torch.Tensor, n_centers: int) -> torch.Tensor:
    """(P,) int64: how many later pairs share each pair's centre (pairs sorted by
    ``center``), i.e. the triplets (j = p, k > p) that pair p leads."""
    n_per = torch.bincount(center, minlength=n_centers)  # (n_centers,)
    end = torch.cumsum(n_per, 0)  # exclusive end of each centre's segment
    p = torch.arange(center.shape[0], device=center.device)
    return end[center] - p - 1


def triplet_blocks(counts: torch.Tensor, max_triplets: int) -> list[tuple[int, int]]:
    """Split pairs [0, P) into ranges whose triplet total is ≤ max_triplets (or one pair)."""
    n = counts.shape[0]
    if n == 0:
        return []
    csum = torch.cumsum(counts, 0)
    total = int(csum[-1])
    if total <= max_triplets:
        return [(0, n)]
    bounds = [0]
    while bounds[-1] < n:
        before = int(csum[bounds[-1] - 1]) if bounds[-1] > 0 else 0
        c = int(torch.searchsorted(csum, before + max_triplets, right=True))
        bounds.append(min(n, max(c, bounds[-1] + 1)))
    return list(itertools.pairwise(bounds))


def triplets(counts: torch.Tensor, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pair indices (j, k) (T,) each, j < k, same centre, of the triplets led by pairs
    [start, stop)."""
    c = counts[start:stop]  # (B,)
    first_local = torch.repeat_interleave(torch.arange(stop - start, device=c.device), c)  # (T,)
    offs = torch.cumsum(c, 0) - c  # (B,) first triplet of each leading pair
    t = torch.arange(first_local.shape[0], device=c.device)
    second = first_local + 1 + (t - offs[first_local])
    return first_local + start, second + start
