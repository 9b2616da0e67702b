"""n2p2's ordering of one central element's symmetry functions (``SymFnc::operator<``)."""

from __future__ import annotations

from typing import Any

from dparallel.kernels.cutoff_types import cutoff_type_id

__all__ = ["n2p2_sort_key"]


def n2p2_sort_key(feature: dict[str, Any], z_of: dict[str, int]) -> tuple:
    """n2p2's ordering of one central element's functions (``Element::sortSymmetryFunctions``).

    Type, cutoff type, α, rc, η, rs, then (angular) ζ, λ, then the neighbour elements by
    atomic number (the smaller first, as n2p2 swaps e1 > e2).
    """
    zs = sorted(z_of[e] for e in feature["neighbors"])
    head = (
        int(feature["type"]),
        cutoff_type_id(feature["cutoff"]),
        float(feature["alpha"]),
        float(feature["rc"]),
        float(feature["eta"]),
        float(feature["rs"]),
    )
    if feature["type"] == 2:
        return (*head, zs[0])
    return (*head, float(feature["zeta"]), float(feature["lambda"]), *zs)
