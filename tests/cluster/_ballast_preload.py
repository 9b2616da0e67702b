"""Worker preload for fault-injection tests: each worker takes 400 MB as it starts, so a
smaller ``memory_limit`` has its nanny kill it before it runs anything (as a limit below
what dparallel's workers need at rest does)."""

from __future__ import annotations

import time

_BALLAST: list[bytearray] = []


def dask_setup(worker) -> None:  # noqa: ANN001 - distributed's preload hook
    _BALLAST.append(bytearray(b"x" * (400 << 20)))  # written: its pages are resident
    time.sleep(1.0)  # the nanny's monitor (every 100 ms) sees it before the worker serves
