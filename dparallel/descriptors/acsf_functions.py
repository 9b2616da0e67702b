"""One ACSF symmetry function as validated data: its parameters in their domain.

:func:`feature_spec` refuses, before any run, what n2p2's formulas have no meaning for (a
non-finite parameter, a cutoff beyond :data:`MAX_R_CUT`, α outside [0, 1)) and, unless
``lenient`` (an n2p2 input.nn, a stored spec), ``eta < 0``, ``lambda`` other than ±1 and
``rs`` at or beyond the cutoff, which n2p2 accepts and computes; :func:`refuse_duplicates`
the same function twice for one centre; :func:`n2p2_sort_key` orders them as n2p2 does.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from dparallel.errors import DescriptorError
from dparallel.kernels.cutoff_types import CUTOFF_TYPES, cutoff_type_id

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["MAX_R_CUT", "feature_spec", "n2p2_sort_key", "refuse_duplicates", "refuse_far_cutoff"]

log = logging.getLogger(__name__)

#: The largest cutoff radius accepted (Å): beyond it a "cutoff" is a unit mistake.
MAX_R_CUT = 50.0

#: The lenient warnings this process has logged: each once, though a potential's set is
#: built again on every load (spec, descriptor set, deployed model).
_warned: set[str] = set()


def refuse_far_cutoff(what: str, value: float, units: str) -> None:
    """Raise :class:`DescriptorError` (a ValueError, so a spec validator may raise it) for
    a cutoff ``what`` beyond :data:`MAX_R_CUT`, with ``units``: how to check them."""
    if value > MAX_R_CUT:
        raise DescriptorError(
            f"{what} = {value:g} Å is beyond {MAX_R_CUT:g} Å; every atom would have every "
            f"other as neighbour (check the units: {units})"
        )


def feature_spec(
    center: str, neighbors: Sequence[str], f: Mapping[str, Any], lenient: bool = False
) -> dict[str, Any]:
    """One validated feature of ``center`` from its parameters ``f``: ``type``, ``eta``,
    ``rc`` and optionally ``rs`` (0), ``cutoff`` ("cos"), ``alpha`` (0), ``zeta``, ``lambda``.

    ``lenient``: ``eta < 0``, ``lambda`` other than ±1 and ``rs >= rc``, which n2p2 accepts,
    are logged as a warning instead of refused (an n2p2 ``input.nn``, a spec a store or model
    file holds).
    """
    type_, eta, rc = int(f["type"]), f["eta"], f["rc"]
    rs, alpha = f.get("rs", 0.0) or 0.0, f.get("alpha", 0.0) or 0.0
    zeta, lambda_ = f.get("zeta"), f.get("lambda")
    cid = cutoff_type_id(f.get("cutoff", "cos"))
    if type_ not in (2, 3, 9):
        raise DescriptorError(f"symmetry function type {type_} unsupported; use 2, 3 or 9")
    if not (math.isfinite(rc) and rc > 0 and math.isfinite(eta) and math.isfinite(rs)):
        raise DescriptorError(f"need a finite rc > 0 and finite eta, rs; got {rc}, {eta}, {rs}")
    if type_ != 2 and (
        zeta is None or lambda_ is None or not (math.isfinite(zeta) and math.isfinite(lambda_))
    ):
        raise DescriptorError(
            f"angular function needs finite zeta and lambda, got {zeta}, {lambda_}"
        )
    if not 0.0 <= alpha < 1.0:
        raise DescriptorError(f"inner cutoff alpha must be in [0, 1), got {alpha}")
    where = f"symmetry function type {type_} of {center} with {'-'.join(neighbors)}"
    units = (  # lenient: an n2p2 input.nn (or a spec read back); else a set made in Å
        "an input.nn in bohr needs units: bohr-hartree" if lenient else "rc is in Å"
    )
    refuse_far_cutoff(f"{where}: cutoff rc", rc, units)
    outside = []  # (refusal, lenient warning): n2p2 accepts these, dparallel's own sets not
    if eta < 0:
        fact = f"{where}: eta = {eta:g} < 0 grows with distance"
        outside.append((f"{fact}; use eta >= 0", fact))
    if rs >= rc:  # not zero: exp(-eta (r - rs)^2) f_c(r) for r < rc, its Gaussian's near tail
        fact = f"{where}: rs = {rs:g} lies at or beyond the cutoff rc = {rc:g}"
        outside.append((f"{fact}, so only its Gaussian's tail is inside; use rs < rc", fact))
    if type_ != 2 and lambda_ not in (-1.0, 1.0):
        outside.append(
            (
                f"{where}: lambda must be -1 or 1, got {lambda_:g} (an n2p2 input.nn may "
                "use others: acsf: {n2p2: input.nn})",
                f"{where}: lambda is {lambda_:g}, not -1 or 1",
            )
        )
    if outside and not lenient:
        raise DescriptorError(outside[0][0])
    for _, text in outside:
        if text not in _warned:
            _warned.add(text)
            log.warning("%s: accepted, as n2p2 accepts it", text)
    return {
        "type": int(type_),
        "center": center,
        "neighbors": list(neighbors),
        "eta": float(eta),
        "rs": float(rs),
        "zeta": None if type_ == 2 else float(zeta),  # type: ignore[arg-type]
        "lambda": None if type_ == 2 else float(lambda_),  # type: ignore[arg-type]
        "rc": float(rc),
        "cutoff": CUTOFF_TYPES[cid],
        "cutoff_id": cid,
        "alpha": float(alpha),
    }


def refuse_duplicates(center: str, features: Sequence[dict[str, Any]]) -> None:
    """Raise if two of a central element's functions are the same function."""
    seen: dict[tuple, int] = {}
    for k, f in enumerate(features):
        key = tuple((name, str(value)) for name, value in sorted(f.items()))
        if key in seen:
            raise DescriptorError(
                f"symmetry functions {seen[key]} and {k} of {center} are the same function "
                f"(type {f['type']}, {'-'.join(f['neighbors'])}, eta {f['eta']:g}, rs "
                f"{f['rs']:g}, rc {f['rc']:g}): a duplicate column; remove one"
            )
        seen[key] = k


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
