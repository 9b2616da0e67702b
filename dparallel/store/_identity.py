"""A store's identity: which store, of all those ever made at a path, this one is.

:func:`~dparallel.store.create_store` gives every store it makes a new random
``identity`` (a root attribute; docs/store-format.md), so a store featurized again at the
same path, overwritten or replaced, has another identity. A reader that must not switch
data in mid-run (training, resuming) records the identity once (:func:`store_identity`)
and asks again later: :func:`current_identity` reads the root document anew, not the copy
the opened store holds.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import zarr

from dparallel.store._layout import ZARR3

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dparallel.store._opened import OpenedStore

__all__ = ["current_identity", "identity_of", "store_identity"]


def identity_of(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The identity in a store's ``dparallel`` attributes: ``{"identity", "created"}``
    (stores made before identities: their creation time only)."""
    return {"identity": meta.get("identity"), "created": meta.get("created")}


def store_identity(store: OpenedStore) -> dict[str, Any]:
    """The identity of ``store`` as it was opened."""
    return identity_of(store.attrs)


def current_identity(store: OpenedStore) -> dict[str, Any] | None:
    """The identity of the store at ``store``'s location now (``None``: none is there)."""
    local = store._backend.local
    try:
        if local is not None:
            doc = json.loads((local / "zarr.json").read_bytes())
            meta = doc.get("attributes", {}).get("dparallel", {})
        else:
            meta = zarr.open_group(store=store._backend.zarr_store, mode="r", **ZARR3).attrs[
                "dparallel"
            ]
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    return identity_of(meta) if isinstance(meta, dict) else None
