"""Write a generated dataset once, atomically."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from dparallel._files import write_with

if TYPE_CHECKING:
    from collections.abc import Callable

logger = logging.getLogger(__name__)


def write_once(path: str | Path, generate: Callable[[], list]) -> Path:
    """Write ``generate()`` to an extxyz file unless it already exists; returns its path."""
    import ase.io

    path = Path(path)
    if path.exists():
        logger.info("dataset %s exists, not regenerating", path)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    structures = generate()
    # a new file renamed into place: a half-written file never looks complete
    write_with(path, lambda tmp: ase.io.write(tmp, structures, format="extxyz"), suffix=".extxyz")
    return path
