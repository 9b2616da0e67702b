"""Dense pure-PyTorch reference (hippynn's ``env_pytorch`` formulas); memory O(P·ν·F)."""

from __future__ import annotations

import torch
from torch import Tensor


def envsum(sense: Tensor, feat: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """env[i,ν,a] = Σ_{p: first=i} s[p,ν]·z[second_p,a] → (N, ν, F)."""
    n_atoms, n_feat = feat.shape
    n_nu = sense.shape[1]
    pair_env = sense.unsqueeze(2) * feat[pair_second].unsqueeze(1)  # (P, ν, F)
    env = torch.zeros((n_atoms, n_nu, n_feat), dtype=feat.dtype, device=feat.device)
    env.index_add_(0, pair_first, pair_env)
    return env


def sensesum(env: Tensor, feat: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """sense[p,ν] = Σ_a env[first_p,ν,a]·z[second_p,a] → (P, ν)."""
    pair_env = env[pair_first]  # (P, ν, F)
    return torch.bmm(pair_env, feat[pair_second].unsqueeze(2)).squeeze(2)


def featsum(env: Tensor, sense: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """feat[j,a] = Σ_{p: second=j} Σ_ν s[p,ν]·env[first_p,ν,a] → (N, F)."""
    n_atoms, _, n_feat = env.shape
    pair_feat = torch.bmm(sense.unsqueeze(1), env[pair_first]).squeeze(1)  # (P, F)
    out = torch.zeros((n_atoms, n_feat), dtype=env.dtype, device=env.device)
    out.index_add_(0, pair_second, pair_feat)
    return out
