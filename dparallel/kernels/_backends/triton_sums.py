"""Triton backend of envsum / sensesum / featsum for CUDA tensors (docs/kernels.md).

One program per (atom, feature block) over pairs grouped by centre (envsum) or neighbour
(featsum), one per block of pairs for sensesum: no atomics, deterministic. Without a CUDA
device or ``TRITON_INTERPRET=1`` importing this module raises ImportError, so the backend
switch lists it as unavailable (and triton is not imported).
"""

from __future__ import annotations

import torch
from torch import Tensor

from dparallel.kernels._backends.segments import segments
from dparallel.kernels._backends.triton_env import interpreting

if not torch.cuda.is_available() and not interpreting():
    raise ImportError("the triton kernel backend needs a CUDA device, or TRITON_INTERPRET=1")

import triton
import triton.language as tl

__all__ = ["envsum", "featsum", "sensesum"]


@triton.jit
def _segment_tile(
    STARTS, n_nu, n_feat, BLOCK_NU: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip  # noqa: ANN001, ANN202
    """This program's atom, its feature block (F,) and as (1, F), the ν column (ν, 1), their
    masks, and the atom's segment [lo, hi) of the sorted pairs."""
    atom = tl.program_id(0).to(tl.int64)  # int32 offsets overflow past N·ν·F = 2**31
    fs1 = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    nus = tl.arange(0, BLOCK_NU)[:, None]
    fs = fs1[None, :]
    lo = tl.load(STARTS + atom)
    hi = tl.load(STARTS + atom + 1)
    return atom, fs1, nus, fs, nus < n_nu, fs < n_feat, lo, hi


@triton.jit
def _envsum_kernel(
    SENSE, FEAT, ORDER, STARTS, SECOND, OUT, n_nu, n_feat,
    BLOCK_NU: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip  # noqa: ANN001, ANN202
    i, _, nus, fs, mnu, mf, lo, hi = _segment_tile(STARTS, n_nu, n_feat, BLOCK_NU, BLOCK_F)
    acc = tl.zeros([BLOCK_NU, BLOCK_F], OUT.dtype.element_ty)
    for q in range(lo, hi):
        p = tl.load(ORDER + q)
        j = tl.load(SECOND + p)
        s = tl.load(SENSE + p * n_nu + nus, mask=mnu, other=0.0)  # (ν, 1)
        z = tl.load(FEAT + j * n_feat + fs, mask=mf, other=0.0)  # (1, F)
        acc += s * z
    tl.store(OUT + (i * n_nu + nus) * n_feat + fs, acc, mask=mnu & mf)


@triton.jit
def _sensesum_kernel(
    ENV, FEAT, FIRST, SECOND, OUT, n_pairs, n_nu, n_feat,
    BLOCK_P: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip  # noqa: ANN001, ANN202
    ps = tl.program_id(0).to(tl.int64) * BLOCK_P + tl.arange(0, BLOCK_P)  # P·ν past 2**31
    mp = ps < n_pairs
    i = tl.load(FIRST + ps, mask=mp, other=0)[:, None]
    j = tl.load(SECOND + ps, mask=mp, other=0)[:, None]
    for nu in range(n_nu):
        acc = tl.zeros([BLOCK_P, BLOCK_F], OUT.dtype.element_ty)
        for f0 in range(0, n_feat, BLOCK_F):
            fs = f0 + tl.arange(0, BLOCK_F)[None, :]
            m = mp[:, None] & (fs < n_feat)
            e = tl.load(ENV + (i * n_nu + nu) * n_feat + fs, mask=m, other=0.0)
            z = tl.load(FEAT + j * n_feat + fs, mask=m, other=0.0)
            acc += e * z
        tl.store(OUT + ps * n_nu + nu, tl.sum(acc, 1), mask=mp)


@triton.jit
def _featsum_kernel(
    ENV, SENSE, ORDER, STARTS, FIRST, OUT, n_nu, n_feat,
    BLOCK_NU: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip  # noqa: ANN001, ANN202
    j, fs1, nus, fs, mnu, mf, lo, hi = _segment_tile(STARTS, n_nu, n_feat, BLOCK_NU, BLOCK_F)
    acc = tl.zeros([BLOCK_NU, BLOCK_F], OUT.dtype.element_ty)
    for q in range(lo, hi):
        p = tl.load(ORDER + q)
        i = tl.load(FIRST + p)
        s = tl.load(SENSE + p * n_nu + nus, mask=mnu, other=0.0)  # (ν, 1)
        e = tl.load(ENV + (i * n_nu + nus) * n_feat + fs, mask=mnu & mf, other=0.0)  # (ν, F)
        acc += s * e
    tl.store(OUT + j * n_feat + fs1, tl.sum(acc, 0), mask=fs1 < n_feat)


def _f_block(n_feat: int) -> int:
    return min(64, triton.next_power_of_2(max(n_feat, 1)))


def envsum(sense: Tensor, feat: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """Per-centre envsum → (N, ν, F)."""
    n_atoms, n_feat = feat.shape
    n_nu = sense.shape[1]
    out = feat.new_zeros((n_atoms, n_nu, n_feat))
    order, starts = segments(pair_first, n_atoms)
    bf = _f_block(n_feat)
    _envsum_kernel[(n_atoms, triton.cdiv(n_feat, bf))](
        sense.contiguous(), feat.contiguous(), order, starts, pair_second.contiguous(), out,
        n_nu, n_feat, BLOCK_NU=triton.next_power_of_2(n_nu), BLOCK_F=bf,
    )  # fmt: skip
    return out


def sensesum(env: Tensor, feat: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """Per-pair sensesum → (P, ν)."""
    n_nu, n_feat = env.shape[1:]
    n_pairs = pair_first.shape[0]
    out = env.new_empty((n_pairs, n_nu))
    block = 64
    _sensesum_kernel[(triton.cdiv(n_pairs, block),)](
        env.contiguous(), feat.contiguous(), pair_first.contiguous(), pair_second.contiguous(),
        out, n_pairs, n_nu, n_feat, BLOCK_P=block, BLOCK_F=_f_block(n_feat),
    )  # fmt: skip
    return out


def featsum(env: Tensor, sense: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """Per-neighbour featsum → (N, F)."""
    n_atoms, n_nu, n_feat = env.shape
    out = env.new_zeros((n_atoms, n_feat))
    order, starts = segments(pair_second, n_atoms)
    bf = _f_block(n_feat)
    _featsum_kernel[(n_atoms, triton.cdiv(n_feat, bf))](
        env.contiguous(), sense.contiguous(), order, starts, pair_first.contiguous(), out,
        n_nu, n_feat, BLOCK_NU=triton.next_power_of_2(n_nu), BLOCK_F=bf,
    )  # fmt: skip
    return out
