"""The zarr store (the only package importing zarr); layout in docs/store-format.md."""

from __future__ import annotations

from dparallel.store._store import (
    FORMAT_VERSION,
    SOURCE_IDENTITY_KEYS,
    Store,
    create_store,
    open_store,
)

__all__ = ["Store", "create_store", "open_store", "FORMAT_VERSION", "SOURCE_IDENTITY_KEYS"]
