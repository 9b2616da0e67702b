"""Shared pytest fixtures."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded random generator, fresh for each test."""
    return np.random.default_rng(20261122)


@pytest.fixture(autouse=True)
def _client_starts_given_up_end_with_their_test():
    """Let a client start that ``start_within`` gave up (a refused address) end before the
    next test: its thread keeps trying until the connect timeout, and meanwhile holds
    dask's global ``scheduler`` setting, which a client the next test opens and closes
    would then restore after it (its xarray reads failed: "no Client active")."""
    import threading

    yield
    for thread in threading.enumerate():
        if thread.name == "dparallel-client-start":
            thread.join(timeout=30)
