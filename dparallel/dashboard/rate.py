"""Featurization throughput: the one definition the terminal bar and the dashboard share.

Both feed :func:`throughput` the run's start time and, per finished partition, the time it
finished, its task's seconds and its structures and atoms, each from their own clock; the
terminal (``dparallel featurize``) and the dashboard page therefore show the same number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["Finished", "Throughput", "throughput"]


class Finished(NamedTuple):
    """One finished partition: when (s, any clock), its task's seconds and its size."""

    time: float
    seconds: float
    n_structures: int
    n_atoms: int


@dataclass(frozen=True)
class Throughput:
    """Rates over the run so far (``None`` before any partition finished)."""

    elapsed_seconds: float  # s, start → last finished partition (≥ the longest task)
    structures_done: int
    atoms_done: int
    structures_per_second: float | None
    atoms_per_second: float | None
    eta_seconds: float | None  # s, remaining structures at the current rate


def throughput(
    started: float | None, finished: Iterable[Finished], structures_total: int | None = None
) -> Throughput:
    """Structures and atoms done over the time from ``started`` to the last finished one.

    Without ``started`` the run is taken to start when its first partition began
    (``time - seconds``). The elapsed time is at least the longest task: a partition
    cannot finish faster than its own task (this guards bursts of late reports).
    """
    parts = list(finished)
    structures = sum(p.n_structures for p in parts)
    atoms = sum(p.n_atoms for p in parts)
    if not parts:
        return Throughput(0.0, 0, 0, None, None, None)
    t0 = started if started is not None else min(p.time - p.seconds for p in parts)
    elapsed = max(max(p.time for p in parts) - t0, max(p.seconds for p in parts))
    if elapsed <= 0:
        return Throughput(0.0, structures, atoms, None, None, None)
    rate = structures / elapsed
    eta = None
    if rate > 0 and structures_total is not None:
        eta = max(structures_total - structures, 0) / rate
    return Throughput(elapsed, structures, atoms, rate, atoms / elapsed, eta)
