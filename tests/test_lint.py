"""CI runs only pytest: so ruff (lint + format) and mypy run here, on the whole repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "ruff check": ["-m", "ruff", "check", "dparallel", "tests", "benchmarks"],
    "ruff format --check": ["-m", "ruff", "format", "--check", "dparallel", "tests", "benchmarks"],
    "mypy dparallel": ["-m", "mypy", "dparallel"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_clean(name: str) -> None:
    done = subprocess.run(
        [sys.executable, *COMMANDS[name]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{name} found problems:\n{done.stdout}\n{done.stderr}"
