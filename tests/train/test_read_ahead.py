"""train/read_ahead.py: items made ahead in a bounded thread."""

from __future__ import annotations

import time

from dparallel.train.read_ahead import background


def test_background_makes_at_most_depth_items_ahead() -> None:
    """A prefetch of ``depth`` holds ``depth`` items not yet taken, not one more waiting
    for room in the queue."""
    made: list[int] = []

    def items():  # noqa: ANN202
        for k in range(8):
            made.append(k)
            yield k

    for depth in (1, 2):
        made.clear()
        taken = 0
        for _ in background(items(), depth, "test-background"):
            taken += 1
            time.sleep(0.05)  # room for the thread to run ahead as far as it may
            assert len(made) - taken <= depth
        assert taken == 8
