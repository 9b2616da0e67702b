"""Epoch callbacks for tests: stop a run after some epochs (to test resuming it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dparallel.train import EpochCallback


def stop_after(epochs: int) -> EpochCallback:
    """A callback that stops training after ``epochs`` epochs of this call."""
    seen = 0

    def stop(row: dict[str, Any]) -> bool:
        nonlocal seen
        seen += 1
        return seen >= epochs

    return stop
