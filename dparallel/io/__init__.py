"""Read structure files (extxyz, n2p2 ``input.data``, any ASE format) into numpy batches.

Indexed random access: :func:`open_source` builds (or loads) a per-file index once, then
``source.read(a, b)`` parses only structures ``[a, b)``. No torch, no dask, no zarr here.
"""

from __future__ import annotations

from dparallel.io._validate import validate_batch
from dparallel.io.source import UNITS, ReadResult, StructureSource, detect_format, open_source

__all__ = [
    "UNITS",
    "ReadResult",
    "StructureSource",
    "detect_format",
    "open_source",
    "validate_batch",
]
