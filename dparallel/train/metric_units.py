"""Units in the names of written metrics: ``energy_rmse`` (eV/atom) → ``energy_rmse_meV_per_atom``.

Training keeps errors in eV/atom and eV/Å internally; ``metrics.csv`` and ``metrics.json``
hold them in meV with the unit in the column name, as the console prints them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Internal metric name → (written suffix, factor from the internal unit).
UNIT_SUFFIXES: dict[str, tuple[str, float]] = {
    "energy_rmse": ("meV_per_atom", 1e3),
    "energy_mae": ("meV_per_atom", 1e3),
    "force_rmse": ("meV_per_A", 1e3),
    "force_mae": ("meV_per_A", 1e3),
    "seconds": ("", 1.0),
}


def _match(key: str) -> tuple[str, float] | None:
    for name, (suffix, factor) in UNIT_SUFFIXES.items():
        if suffix and (key == name or key.endswith(f"_{name}")):
            return f"{key}_{suffix}", factor
    return None


def with_units(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with each error renamed to carry its unit and converted (eV → meV)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        hit = _match(key)
        if hit is None or value is None:
            out[hit[0] if hit else key] = value
        else:
            out[hit[0]] = float(value) * hit[1]
    return out


def without_units(row: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`with_units` (keys without a unit pass unchanged)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        for name, (suffix, factor) in UNIT_SUFFIXES.items():
            tail = f"{name}_{suffix}"
            if suffix and key.endswith(tail):
                out[key.removesuffix(f"_{suffix}")] = None if value is None else value / factor
                break
        else:
            out[key] = value
    return out
