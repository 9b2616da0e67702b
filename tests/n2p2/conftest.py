"""Fixtures for the n2p2 tests: the n2p2 tools (skip when not built) and its water example."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dparallel.n2p2.binaries import find_bin_dir

#: n2p2's water example (../shared/n2p2/water beside the repository, or $N2P2_WATER).
WATER = Path(
    os.environ.get("N2P2_WATER", Path(__file__).resolve().parents[3] / "shared/n2p2/water")
)


@pytest.fixture(scope="session")
def n2p2_bin() -> Path:
    """The n2p2 bin directory; skips the test when n2p2 is not built."""
    found = find_bin_dir()
    if found is None:
        pytest.skip("n2p2 is not built: run ../shared/n2p2/build.sh (or set N2P2_BIN)")
    return found


@pytest.fixture(scope="session")
def water() -> Path:
    """n2p2's water example (input.nn, input.data in Bohr/Hartree); skips when absent."""
    if not (WATER / "input.nn").is_file() or not (WATER / "input.data").is_file():
        pytest.skip(f"n2p2's water example not found at {WATER} (set N2P2_WATER)")
    return WATER
