"""Undo the malloc setting that makes array-heavy tasks slower in Dask workers.

The Dask nanny starts every worker with ``MALLOC_TRIM_THRESHOLD_=65536``. Any glibc malloc
threshold switches glibc's *dynamic* mmap threshold off, so every temporary array above
128 KiB becomes a fresh ``mmap`` that page-faults on each use
(``benchmarks/bench_scaling.py --no-malloc-tune`` shows the cost). :func:`tune_allocator`
puts back what the dynamic rule converges to (mmap threshold 32 MiB, trim threshold twice
that): only on glibc, only when such a variable is set, once per process, and not at all
when ``DPARALLEL_MALLOC_TUNE=0``.
"""

from __future__ import annotations

import logging
import os
import threading

from dparallel._libc import glibc

__all__ = ["ENV_MALLOC_TUNE", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "tune_allocator"]

logger = logging.getLogger(__name__)

#: Set to ``0`` to leave the worker's malloc settings alone.
ENV_MALLOC_TUNE = "DPARALLEL_MALLOC_TUNE"
#: glibc's largest dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX).
MMAP_THRESHOLD = 32 * 2**20
#: Trim threshold the dynamic rule pairs with it (twice the mmap threshold).
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
# glibc's mallopt parameter numbers (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# environment variables that switch glibc's dynamic mmap threshold off
_STATIC_VARS = (
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)

_lock = threading.Lock()
_result: bool | None = None


def tune_allocator() -> bool:
    """Restore glibc's converged malloc thresholds in this process if the environment froze
    them (once per process: call it at the start of every task); whether they are now set."""
    global _result
    with _lock:
        if _result is None:
            _result = _tune_once()
        return _result


def _tune_once() -> bool:
    """Apply the thresholds when the conditions in the module docstring hold."""
    if os.environ.get(ENV_MALLOC_TUNE, "1").strip() == "0":
        return False
    frozen = [var for var in _STATIC_VARS if var in os.environ]
    libc = glibc() if frozen else None
    if libc is None:
        return False
    ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    if ok:
        logger.debug(
            "malloc thresholds set to mmap %d, trim %d (environment had %s)",
            MMAP_THRESHOLD,
            TRIM_THRESHOLD,
            ", ".join(frozen),
        )
    else:
        logger.warning("mallopt refused the malloc thresholds; worker tasks may run slower")
    return ok
