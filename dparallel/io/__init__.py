"""Read structure files (extxyz, n2p2 ``input.data``, any ASE format) into numpy batches.

Indexed random access: :func:`open_source` builds (or loads) a per-file index once, then
``source.read(a, b)`` parses only structures ``[a, b)``. No torch, no dask, no zarr here.
The names load on first use (PEP 562): ``dparallel.io.units`` is importable without numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dparallel._lazy import lazy_getattr

if TYPE_CHECKING:
    from dparallel.io._validate import validate_batch
    from dparallel.io.source import (
        UNITS,
        ReadResult,
        StructureSource,
        detect_format,
        known_format,
        open_source,
    )

__all__ = [
    "UNITS",
    "ReadResult",
    "StructureSource",
    "detect_format",
    "known_format",
    "open_source",
    "validate_batch",
]

__getattr__ = lazy_getattr(
    __name__,
    {
        "UNITS": "source",
        "ReadResult": "source",
        "StructureSource": "source",
        "detect_format": "source",
        "known_format": "source",
        "open_source": "source",
        "validate_batch": "_validate",
    },
)
