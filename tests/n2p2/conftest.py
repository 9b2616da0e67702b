"""Fixtures for the n2p2 tests: the n2p2 tools (skip when not built); its water example is
tests/conftest.py's ``water``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from dparallel.n2p2.binaries import find_bin_dir

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(scope="session")
def n2p2_bin() -> Path:
    """The n2p2 bin directory; skips the test when n2p2 is not built."""
    found = find_bin_dir()
    if found is None:
        pytest.skip("n2p2 is not built: run ../shared/n2p2/build.sh (or set N2P2_BIN)")
    return found
