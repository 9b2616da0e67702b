"""Memory-lean CPU backend: numba kernels over pairs grouped by centre atom.

Pairs sorted by ``pair_first`` once per call, each centre's env row (ν, F) kept in L1;
featsum scatters into one private (N, F) accumulator per thread (deterministic for a given
thread count). Each call runs ``min(torch.get_num_threads(), NUMBA_NUM_THREADS)`` threads.
See docs/kernels.md, "Backends" and "Threads".
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numba
import numpy as np
import torch
from torch import Tensor

from dparallel.kernels._backends.segments import segments
from dparallel.kernels._numba_jit import cache_anywhere

if TYPE_CHECKING:
    from collections.abc import Iterator

cache_anywhere()  # before the kernels below are decorated
# Reassociation lets LLVM vectorise the reductions; NaN/inf semantics are kept.
_FLAGS: dict[str, Any] = dict(
    parallel=True, cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz"}
)


@numba.njit(**_FLAGS)
def _envsum_kernel(sense, feat, order, starts, second, out):  # pragma: no cover - jitted
    n_nu = sense.shape[1]
    n_feat = feat.shape[1]
    for i in numba.prange(starts.shape[0] - 1):
        acc = out[i]  # (ν, F), stays in L1 while atom i's pairs stream past
        q, end = starts[i], starts[i + 1]
        while q + 4 <= end:  # four pairs per pass: 4 FMAs per load/store of acc
            p0, p1, p2, p3 = order[q], order[q + 1], order[q + 2], order[q + 3]
            z0, z1 = feat[second[p0]], feat[second[p1]]
            z2, z3 = feat[second[p2]], feat[second[p3]]
            for n in range(n_nu):
                s0, s1, s2, s3 = sense[p0, n], sense[p1, n], sense[p2, n], sense[p3, n]
                for a in range(n_feat):
                    acc[n, a] += s0 * z0[a] + s1 * z1[a] + s2 * z2[a] + s3 * z3[a]
            q += 4
        while q < end:
            p = order[q]
            z0 = feat[second[p]]
            for n in range(n_nu):
                s0 = sense[p, n]
                for a in range(n_feat):
                    acc[n, a] += s0 * z0[a]
            q += 1


@numba.njit(**_FLAGS)
def _sensesum_kernel(env, feat, order, starts, second, out):  # pragma: no cover - jitted
    n_nu = env.shape[1]
    n_feat = env.shape[2]
    zero = np.zeros(1, dtype=out.dtype)[0]
    for i in numba.prange(starts.shape[0] - 1):
        e = env[i]  # (ν, F), reused by all pairs of atom i
        for q in range(starts[i], starts[i + 1]):
            p = order[q]
            z = feat[second[p]]
            for n in range(n_nu):
                acc = zero
                for a in range(n_feat):
                    acc += e[n, a] * z[a]
                out[p, n] = acc


@numba.njit(**_FLAGS)
def _featsum_kernel(env, sense, order, starts, second, bounds, out):  # pragma: no cover
    # out: (T, N, F), one private accumulator per chunk of centre atoms (no write races)
    n_nu = env.shape[1]
    n_feat = env.shape[2]
    for t in numba.prange(bounds.shape[0] - 1):
        tmp = np.empty(n_feat, dtype=out.dtype)
        for i in range(bounds[t], bounds[t + 1]):
            e = env[i]  # (ν, F), reused by all pairs of atom i
            for q in range(starts[i], starts[i + 1]):
                p = order[q]
                j = second[p]
                # explicit loops: faster than slice ops here (docs/kernels.md)
                for a in range(n_feat):
                    tmp[a] = 0
                for n in range(n_nu):
                    s0 = sense[p, n]
                    for a in range(n_feat):
                        tmp[a] += s0 * e[n, a]
                for a in range(n_feat):
                    out[t, j, a] += tmp[a]


@contextmanager
def _thread_budget() -> Iterator[None]:
    """Run numba with torch's thread budget for this OS thread, and keep torch's budget.

    numba's OpenMP threading layer shares the OpenMP runtime with torch and resets its
    thread count when it starts; torch's count is restored afterwards.
    """
    n = torch.get_num_threads()
    limit = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]  # set at run time
    numba.set_num_threads(max(1, min(n, limit)))
    try:
        yield
    finally:
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)


def _segments(key: Tensor, n_atoms: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~dparallel.kernels._backends.segments.segments` as numpy arrays."""
    order, starts = segments(key, n_atoms)
    return order.numpy(), starts.numpy()


def _np(t: Tensor) -> np.ndarray:
    """A contiguous numpy view (no copy when already contiguous)."""
    return t.detach().contiguous().numpy()


def envsum(sense: Tensor, feat: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """Segment-reduced envsum → (N, ν, F)."""
    n_atoms, n_feat = feat.shape
    out = torch.zeros((n_atoms, sense.shape[1], n_feat), dtype=feat.dtype)
    order, starts = _segments(pair_first, n_atoms)
    with _thread_budget():
        _envsum_kernel(_np(sense), _np(feat), order, starts, _np(pair_second), out.numpy())
    return out


def sensesum(env: Tensor, feat: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """Per-pair sensesum, pairs visited grouped by centre atom → (P, ν)."""
    out = torch.empty((pair_first.shape[0], env.shape[1]), dtype=env.dtype)
    order, starts = _segments(pair_first, env.shape[0])
    with _thread_budget():
        _sensesum_kernel(_np(env), _np(feat), order, starts, _np(pair_second), out.numpy())
    return out


def featsum(env: Tensor, sense: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """featsum, pairs grouped by centre atom, per-thread accumulators → (N, F)."""
    n_atoms, _, n_feat = env.shape
    order, starts = _segments(pair_first, n_atoms)
    with _thread_budget():
        n_chunks = numba.get_num_threads()
        # chunks of centre atoms with about equal numbers of pairs
        cuts = np.linspace(0, pair_first.shape[0], n_chunks + 1)
        bounds = np.searchsorted(starts, cuts).astype(np.int64)
        bounds[0], bounds[-1] = 0, n_atoms
        out = torch.zeros((n_chunks, n_atoms, n_feat), dtype=env.dtype)  # (T, N, F)
        _featsum_kernel(_np(env), _np(sense), order, starts, _np(pair_second), bounds, out.numpy())
    return out[0] if n_chunks == 1 else out.sum(0)
