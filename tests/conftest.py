"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

#: n2p2's water example (../shared/n2p2/water beside the repository, or $N2P2_WATER).
WATER = Path(
    os.environ.get("N2P2_WATER", Path(__file__).resolve().parents[2] / "shared/n2p2/water")
)


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded random generator, fresh for each test."""
    return np.random.default_rng(20261122)


@pytest.fixture(autouse=True)
def _client_starts_given_up_end_with_their_test():
    """Let a client start that ``start_within`` gave up (a refused address) end before the
    next test: its thread keeps trying until the connect timeout. (Such a start once held
    dask's global ``scheduler`` setting meanwhile, and a later test's xarray reads failed
    with "no Client active"; the client is now made the default only once connected.)"""
    import threading

    yield
    for thread in threading.enumerate():
        if thread.name == "dparallel-client-start":
            thread.join(timeout=30)


@pytest.fixture(scope="session")
def water() -> Path:
    """n2p2's water example (input.nn, input.data in Bohr/Hartree); skips when absent."""
    if not (WATER / "input.nn").is_file() or not (WATER / "input.data").is_file():
        pytest.skip(f"n2p2's water example not found at {WATER} (set N2P2_WATER)")
    return WATER
