"""Dimension names of the store's arrays (zarr 3 ``dimension_names``), for xarray.

Arrays that share an axis share its name, so ``xarray.open_zarr(path, group=...)`` opens
every group: ``structures/`` atom rows are ``atom`` and structure rows ``structure``;
features of central element E in a partition have rows ``atom_<E>`` and columns
``feature_<E>``; derivatives for neighbour element F have rows ``pair_<E>_<F>`` and the
columns an F neighbour can change ``feature_<E>_<F>``; Cartesian components are ``xyz``.
An array this module does not know gets ``<name>_<axis>`` names (unique, never clashing).
"""

from __future__ import annotations

__all__ = ["feature_dims", "generic_dims", "structure_dims"]

#: Names of the trailing axes of the fixed ``structures/`` and ``partitions/`` arrays.
_TRAILING = {
    "positions": ("xyz",),
    "forces": ("xyz",),
    "cells": ("cell_vector", "xyz"),
    "pbc": ("cell_vector",),
    "elements": ("atomic_number",),
}


def generic_dims(name: str, ndim: int, leading: tuple[str, ...] = ()) -> tuple[str, ...]:
    """``leading`` followed by ``<name>_<k>`` for the remaining axes."""
    base = name.rsplit("/", 1)[-1]
    return (*leading, *(f"{base}_{k}" for k in range(len(leading), ndim)))[:ndim]


def structure_dims(name: str, axis: str, ndim: int) -> tuple[str, ...]:
    """Dims of ``structures/<name>`` or ``partitions/<name>`` with leading ``axis``."""
    trailing = _TRAILING.get(name, ())
    if len(trailing) == ndim - 1:
        return (axis, *trailing)
    return generic_dims(name, ndim, (axis,))


def feature_dims(element: str, name: str, ndim: int) -> tuple[str, ...]:
    """Dims of ``features/<d>/<element>/<name>`` (``name`` may be ``d/<F>/<array>``)."""
    e = element
    if name == "values" and ndim == 2:
        return (f"atom_{e}", f"feature_{e}")
    if name == "atom_index" and ndim == 1:
        return (f"atom_{e}",)
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "d":
        f, array = parts[1], parts[2]
        pair, feat = f"pair_{e}_{f}", f"feature_{e}_{f}"
        known = {
            "pair_first": (pair,),
            "pair_second": (pair,),
            "center": (pair,),
            "vectors": (pair, "xyz"),
            "feature_index": (feat,),
            "dG_dr": (pair, feat, "xyz"),
            # store formats 2 and 3 (store/_derivatives.py): packed rows, feature-major float32
            "pairs": (f"pair_field_{e}_{f}", pair),
            "vectors_t": ("xyz", pair),
            "radial": (feat,),
            "dG_dr_radial": (f"{feat}_radial", pair),
            "dG_dr_angular": (f"{feat}_angular", "xyz", pair),
            # format 3: the radial columns' s, then x, y, z rows of each other column
            "dG_dr_split": (f"{feat}_split", pair),
        }.get(array)
        if known is not None and len(known) == ndim:
            return known
        return generic_dims(f"{e}_{f}_{array}", ndim)
    return generic_dims(f"{e}_{name.replace('/', '_')}", ndim)
