"""Memory-lean pure-PyTorch backend: the reference formulas applied to blocks of pairs.

Pairs are processed in blocks of ``B`` so that the largest temporary is (B, ν, F), bounded
by :data:`BLOCK_BYTES`; peak memory is O(P·ν + N·ν·F + B·ν·F). Blocks of a few thousand
pairs also stay in cache, which makes this backend faster than the dense reference.
Works on any device torch supports.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Upper bound on the (B, ν, F) temporary of one block, in bytes.
BLOCK_BYTES = 16 * 2**20


def _block(n_nu: int, n_feat: int, dtype: torch.dtype) -> int:
    """Number of pairs per block so that a (B, ν, F) temporary fits in BLOCK_BYTES."""
    itemsize = torch.finfo(dtype).bits // 8
    return max(64, BLOCK_BYTES // max(1, n_nu * n_feat * itemsize))


def envsum(sense: Tensor, feat: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """Blocked envsum → (N, ν, F)."""
    n_atoms, n_feat = feat.shape
    n_pairs, n_nu = sense.shape
    env = torch.zeros((n_atoms, n_nu, n_feat), dtype=feat.dtype, device=feat.device)
    step = _block(n_nu, n_feat, feat.dtype)
    for a in range(0, n_pairs, step):
        b = min(a + step, n_pairs)
        block = sense[a:b].unsqueeze(2) * feat[pair_second[a:b]].unsqueeze(1)  # (B, ν, F)
        env.index_add_(0, pair_first[a:b], block)
    return env


def sensesum(env: Tensor, feat: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """Blocked sensesum → (P, ν)."""
    n_nu, n_feat = env.shape[1:]
    n_pairs = pair_first.shape[0]
    out = torch.empty((n_pairs, n_nu), dtype=env.dtype, device=env.device)
    step = _block(n_nu, n_feat, env.dtype)
    for a in range(0, n_pairs, step):
        b = min(a + step, n_pairs)
        pair_env = env[pair_first[a:b]]  # (B, ν, F)
        out[a:b] = torch.bmm(pair_env, feat[pair_second[a:b]].unsqueeze(2)).squeeze(2)
    return out


def featsum(env: Tensor, sense: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """Blocked featsum → (N, F)."""
    n_atoms, n_nu, n_feat = env.shape
    n_pairs = pair_first.shape[0]
    out = torch.zeros((n_atoms, n_feat), dtype=env.dtype, device=env.device)
    step = _block(n_nu, n_feat, env.dtype)
    for a in range(0, n_pairs, step):
        b = min(a + step, n_pairs)
        pair_feat = torch.bmm(sense[a:b].unsqueeze(1), env[pair_first[a:b]]).squeeze(1)  # (B, F)
        out.index_add_(0, pair_second[a:b], pair_feat)
    return out
