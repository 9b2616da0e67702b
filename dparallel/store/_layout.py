"""The store's layout: format versions, array names and shapes, chunk keys, compressors.

Every name here is what the writers (:mod:`~dparallel.store._writes`, the empty layout
built by :mod:`~dparallel.store._create`) and the readers (:mod:`~dparallel.store._reads`)
agree on; docs/store-format.md describes the result.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.codecs import BloscCodec
from zarr.core.chunk_key_encodings import DefaultChunkKeyEncoding

from dparallel.errors import StoreError
from dparallel.store import _checked_blosc  # noqa: F401 - zarr's blosc, its frames checked

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CHUNK_KEYS",
    "FORMAT_VERSION",
    "READABLE_FORMATS",
    "SOURCE_IDENTITY_KEYS",
    "ZARR3",
]

#: How every group of a store is opened: zarr format 3, without consolidated metadata.
#: Left open, zarr probes ``.zgroup``, ``.zattrs`` and ``.zmetadata`` at each open: on
#: object storage a listing request each.
ZARR3: dict[str, Any] = {"zarr_format": 3, "use_consolidated": False}

#: Version of the on-disk layout; bumped on incompatible changes. 2: per-pair derivatives
#: in float32, radial columns as one number per pair, feature-major (``_derivatives``);
#: 3: a block's derivative columns in one array, its feature index and radial flags as
#: attributes, chunk keys ``c.0.0`` (:data:`CHUNK_KEYS`).
FORMAT_VERSION = 3
#: Formats this dparallel reads (``mode="r"``); it writes :data:`FORMAT_VERSION` only.
READABLE_FORMATS = (1, 2, 3)
#: Fingerprint fields that identify a source's content (path and mtime may change).
SOURCE_IDENTITY_KEYS = (
    "format",
    "size",
    "n_structures",
    "n_atoms",
    "index_sha256",
    "sample_sha256",
)
_N_Z = 119  # atomic numbers 0..118
#: Compressor of numeric arrays: LZ4 behind a byte shuffle (pair indices shrink ~9x).
_NUMERIC_COMPRESSORS = (BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),)
#: Chunk keys ``c.0.0`` (one file in the array's folder) instead of zarr's ``c/0/0``, which
#: makes a folder per leading index: with the rest of format 3, a water partition with dG/dr
#: is 70 files and folders instead of 156. Each is an inode to allocate, and where many were
#: freed shortly before (a store replaced, a benchmark rerun) ext4 without a journal scans
#: past them (docs/store-format.md, "Why few files").
CHUNK_KEYS = DefaultChunkKeyEncoding(separator=".")


def _compressors(dtype: Any) -> Any:
    """Compressors for an array of ``dtype``: LZ4/shuffle for numbers, zarr's default for
    strings.

    Floats too: a water partition's derivative arrays shrink 1.09x when its structures are
    all distinct and 1.5x in the benchmark's water x25 set, whose partitions repeat each
    structure 3-4 times (docs/store-format.md, "What LZ4 buys on derivatives"); values
    shrink ~3x.
    """
    if dtype is str or np.dtype(dtype).kind in "OUS":
        return "auto"
    return _NUMERIC_COMPRESSORS


#: The fixed arrays under ``structures/``:
#: name → (axis "atom"|"structure", trailing shape, dtype, fill value).
_STRUCTURE_ARRAYS: dict[str, tuple[str, tuple[int, ...], Any, Any]] = {
    "numbers": ("atom", (), np.uint8, 0),
    "positions": ("atom", (3,), np.float64, 0.0),
    "forces": ("atom", (3,), np.float64, np.nan),
    "cells": ("structure", (3, 3), np.float64, 0.0),
    "pbc": ("structure", (3,), np.bool_, False),
    "energy": ("structure", (), np.float64, np.nan),
    "n_atoms": ("structure", (), np.int64, 0),
    "source_index": ("structure", (), np.int64, -1),
    "tags": ("structure", (), str, ""),
}

#: The per-partition arrays under ``partitions/``: name → (trailing shape, dtype); fill 0.
_PARTITION_ARRAYS: dict[str, tuple[tuple[int, ...], Any]] = {
    "n_structures": ((), np.int64),
    "n_atoms": ((), np.int64),
    "elements": ((_N_Z,), np.bool_),
    "done": ((), np.uint8),
}
#: The arrays of a descriptor's group for one central element (beside the ``d`` group of
#: per-pair derivatives), see :func:`_features_group`.
_FEATURE_ARRAYS = ("values", "atom_index")

#: Root attributes that define a store (:meth:`Store.update_attrs` refuses them).
_IDENTITY_ATTRS = {
    "format_version",
    "versions",
    "created",
    "identity",
    "source",
    "config",
    "plan",
    "slots",
}


def made_by(meta: Mapping[str, Any]) -> str:
    """The command that makes (and remakes) a store with root attributes ``meta``:
    ``featurize``, or ``ingest`` for a store of structures only."""
    config = meta.get("config")
    return "featurize" if isinstance(config, dict) and config.get("features") else "ingest"


def remake_advice(made_by: str) -> str:
    """The fix for damage no partition owns: the command that made the store, again."""
    return f"{made_by} the store again with --overwrite"


def repair_advice(made_by: str) -> str:
    """The fix for damage inside done partitions: the command that made the store, with
    ``--repair``, which computes only those again."""
    return (
        f"rerun the {made_by} that made it with --repair to compute only the damaged "
        "partitions again"
    )


def _jsonable(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` as JSON would read it back (tuples as lists, keys sorted)."""
    try:
        return json.loads(json.dumps(dict(config), sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"config must be JSON-serialisable: {exc}") from exc


def _index_reason_pairs(value: Any) -> list[tuple[Any, Any]]:
    """``[[index, reason], …]`` attributes (skipped structures) as pairs; nothing for
    anything else."""
    if not isinstance(value, list):
        return []
    return [(rec[0], rec[1]) for rec in value if isinstance(rec, list) and len(rec) == 2]


def _features_group(descriptor: str, element: str) -> str:
    """Group (below ``parts/<p>``) of one descriptor's arrays for one central element."""
    return f"features/{descriptor}/{element}"


def _partition_group(p: int) -> str:
    """The group of what only partition ``p``'s task writes (features, skipped, report)."""
    return f"parts/{p}"
