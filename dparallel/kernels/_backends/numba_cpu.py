"""Memory-lean CPU backend: numba kernels over pairs sorted by receiving atom.

envsum sorts pairs by ``pair_first`` and featsum by ``pair_second`` (one stable argsort
per call, O(P)), then each atom's segment is reduced in a private accumulator row of the
output; sensesum is a direct loop over pairs. No (P, ν, F) temporary exists: peak memory
is O(P·ν + N·ν·F). Results are deterministic (fixed summation order per atom).

Threads: each call uses ``min(torch.get_num_threads(), NUMBA_NUM_THREADS)`` threads, so a
Dask worker that runs torch with one thread also runs these kernels with one thread.
Kernels are compiled on first use per dtype and cached on disk (``cache=True``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numba
import numpy as np
import torch
from torch import Tensor


@numba.njit(parallel=True, cache=True, nogil=True)
def _envsum_kernel(sense, feat, order, starts, second, out):  # pragma: no cover - jitted
    n_atoms = starts.shape[0] - 1
    n_nu = sense.shape[1]
    n_feat = feat.shape[1]
    for i in numba.prange(n_atoms):
        acc = out[i]  # (ν, F) view
        for q in range(starts[i], starts[i + 1]):
            p = order[q]
            j = second[p]
            for n in range(n_nu):
                s = sense[p, n]
                for a in range(n_feat):
                    acc[n, a] += s * feat[j, a]


@numba.njit(parallel=True, cache=True, nogil=True)
def _sensesum_kernel(env, feat, first, second, out):  # pragma: no cover - jitted
    n_pairs = first.shape[0]
    n_nu = env.shape[1]
    n_feat = env.shape[2]
    for p in numba.prange(n_pairs):
        i = first[p]
        j = second[p]
        for n in range(n_nu):
            acc = 0.0
            for a in range(n_feat):
                acc += env[i, n, a] * feat[j, a]
            out[p, n] = acc


@numba.njit(parallel=True, cache=True, nogil=True)
def _featsum_kernel(env, sense, order, starts, first, out):  # pragma: no cover - jitted
    n_atoms = starts.shape[0] - 1
    n_nu = sense.shape[1]
    n_feat = env.shape[2]
    for j in numba.prange(n_atoms):
        acc = out[j]  # (F,) view
        for q in range(starts[j], starts[j + 1]):
            p = order[q]
            i = first[p]
            for n in range(n_nu):
                s = sense[p, n]
                for a in range(n_feat):
                    acc[a] += s * env[i, n, a]


@contextmanager
def _thread_budget() -> Iterator[None]:
    """Run numba with torch's thread budget for this OS thread, and keep torch's budget.

    numba's OpenMP threading layer shares the OpenMP runtime with torch and resets its
    thread count when it starts; torch's count is restored afterwards.
    """
    n = torch.get_num_threads()
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)


def _segments(key: Tensor, n_atoms: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable sort order of ``key`` and CSR-style start offsets (N+1,) per atom."""
    order = torch.argsort(key, stable=True)  # (P,)
    counts = torch.bincount(key, minlength=n_atoms)  # (N,)
    starts = torch.zeros(n_atoms + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=starts[1:])
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
    """Per-pair sensesum → (P, ν)."""
    out = torch.empty((pair_first.shape[0], env.shape[1]), dtype=env.dtype)
    with _thread_budget():
        _sensesum_kernel(_np(env), _np(feat), _np(pair_first), _np(pair_second), out.numpy())
    return out


def featsum(env: Tensor, sense: Tensor, pair_first: Tensor, pair_second: Tensor) -> Tensor:
    """Segment-reduced featsum → (N, F)."""
    n_atoms, _, n_feat = env.shape
    out = torch.zeros((n_atoms, n_feat), dtype=env.dtype)
    order, starts = _segments(pair_second, n_atoms)
    with _thread_budget():
        _featsum_kernel(_np(env), _np(sense), order, starts, _np(pair_first), out.numpy())
    return out
