"""Write a generated dataset once, atomically."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

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
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # two runs at once: two temp files
    ase.io.write(tmp, generate(), format="extxyz")
    tmp.replace(path)  # atomic: a half-written file never looks complete
    return path
