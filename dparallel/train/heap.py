"""Give the memory of dropped partitions back to the system (glibc's ``malloc_trim``).

A decoded partition is hundreds of MB of arrays of a few MB each; glibc serves arrays of
that size from its heaps once one was freed (its dynamic mmap threshold rises to 32 MiB)
and keeps the freed blocks there, in each thread's arena (the prefetch thread's among
them), so without :func:`trim_heap` a streamed run's RSS grows by partitions long dropped
(docs/training.md "Memory").
"""

from __future__ import annotations

from dparallel._libc import glibc


def trim_heap() -> None:
    """Return the free pages of every malloc arena to the system (glibc's ``malloc_trim``;
    nothing to trim with another C library)."""
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)
