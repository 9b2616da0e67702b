"""n2p2 cutoff function types by number and name (no torch: the driver reads specs with it;
the functions are in :mod:`~dparallel.kernels.cutoffs` and the compiled kernel)."""

from __future__ import annotations

from dparallel.errors import DescriptorError

__all__ = ["CUTOFF_TYPES", "cutoff_type_id"]

#: n2p2 ``cutoff_type`` number → name.
CUTOFF_TYPES: dict[int, str] = {
    0: "hard",
    1: "cos",
    2: "tanhu",
    3: "tanh",
    4: "exp",
    5: "poly1",
    6: "poly2",
    7: "poly3",
    8: "poly4",
}
_BY_NAME = {v: k for k, v in CUTOFF_TYPES.items()}


def cutoff_type_id(cutoff: str | int) -> int:
    """n2p2 number of a cutoff given by name (``"cos"``) or number (``1``)."""
    if isinstance(cutoff, str):
        key = cutoff.strip().lower()
        if key.isdigit():
            return cutoff_type_id(int(key))
        if key not in _BY_NAME:
            raise DescriptorError(
                f"unknown cutoff {cutoff!r}; expected one of {sorted(_BY_NAME)} or 0-8"
            )
        return _BY_NAME[key]
    if int(cutoff) not in CUTOFF_TYPES:
        raise DescriptorError(f"unknown cutoff type {cutoff!r}; expected 0-8")
    return int(cutoff)
