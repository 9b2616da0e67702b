"""Memory-lean pure-PyTorch backend: the reference formulas on blocks of pairs, with one
(B, ν, F) workspace of at most :data:`BLOCK_BYTES` reused by every block (docs/kernels.md).
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Upper bound on the (B, ν, F) workspace, in bytes.
BLOCK_BYTES = 16 * 2**20


def _block(n_pairs: int, n_nu: int, n_feat: int, dtype: torch.dtype) -> int:
    """Number of pairs per block so that a (B, ν, F) workspace fits in BLOCK_BYTES."""
    itemsize = torch.finfo(dtype).bits // 8
    return max(1, min(n_pairs, max(64, BLOCK_BYTES // max(1, n_nu * n_feat * itemsize))))


def envsum(sense: Tensor, feat: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """Blocked envsum → (N, ν, F)."""
    n_atoms, n_feat = feat.shape
    n_pairs, n_nu = sense.shape
    env = torch.zeros((n_atoms, n_nu, n_feat), dtype=feat.dtype, device=feat.device)
    step = _block(n_pairs, n_nu, n_feat, feat.dtype)
    work = feat.new_empty((step, n_nu, n_feat))  # (B, ν, F)
    for a in range(0, n_pairs, step):
        b = min(a + step, n_pairs)
        block = work[: b - a]
        torch.mul(sense[a:b].unsqueeze(2), feat[pair_second[a:b]].unsqueeze(1), out=block)
        env.index_add_(0, pair_first[a:b], block)
    return env


def sensesum(env: Tensor, feat: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """Blocked sensesum → (P, ν)."""
    n_nu, n_feat = env.shape[1:]
    n_pairs = pair_first.shape[0]
    out = env.new_empty((n_pairs, n_nu, 1))
    step = _block(n_pairs, n_nu, n_feat, env.dtype)
    work = env.new_empty((step, n_nu, n_feat))  # (B, ν, F)
    for a in range(0, n_pairs, step):
        b = min(a + step, n_pairs)
        block = work[: b - a]
        torch.index_select(env, 0, pair_first[a:b], out=block)
        torch.bmm(block, feat[pair_second[a:b]].unsqueeze(2), out=out[a:b])
    return out.squeeze(2)


def featsum(env: Tensor, sense: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """Blocked featsum → (N, F)."""
    n_atoms, n_nu, n_feat = env.shape
    n_pairs = pair_first.shape[0]
    out = env.new_zeros((n_atoms, n_feat))
    step = _block(n_pairs, n_nu, n_feat, env.dtype)
    work = env.new_empty((step, n_nu, n_feat))  # (B, ν, F)
    pair_feat = env.new_empty((step, 1, n_feat))  # (B, 1, F)
    for a in range(0, n_pairs, step):
        b = min(a + step, n_pairs)
        block = work[: b - a]
        torch.index_select(env, 0, pair_first[a:b], out=block)
        torch.bmm(sense[a:b].unsqueeze(1), block, out=pair_feat[: b - a])
        out.index_add_(0, pair_second[a:b], pair_feat[: b - a].squeeze(1))
    return out
