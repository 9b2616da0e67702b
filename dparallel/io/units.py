"""The unit systems a structure file (or an n2p2 file) may be in: one table, one check.

No numpy and no ASE at import (the CLI's option parser needs only the names); the factors
(:func:`unit_factors`) are ASE's CODATA values, imported when first asked for. Every
module that takes a unit-system name checks it here (:func:`check_units`, one message)
and compares two here (:func:`same_units`: ``ase`` and ``angstrom-ev`` are one system).
"""

from __future__ import annotations

from dparallel.errors import ConfigError

__all__ = ["UNIT_SYSTEMS", "check_units", "same_units", "unit_factors"]

#: Unit system → the names in :mod:`ase.units` of its length and energy units.
_SYSTEMS: dict[str, tuple[str, str]] = {
    "ase": ("Ang", "eV"),  # ASE's own (Å, eV)
    "angstrom-ev": ("Ang", "eV"),  # its alias
    "bohr-hartree": ("Bohr", "Hartree"),  # n2p2/RuNNer atomic units
}

#: ``--units`` choices and every ``units`` a file or a setting may name.
UNIT_SYSTEMS: tuple[str, ...] = tuple(_SYSTEMS)


def check_units(name: object, where: str, error: type[Exception] = ConfigError) -> str:
    """``name`` if it names a unit system, else ``error`` (the caller's error class) with
    the one message: ``where`` (the setting, e.g. ``dataset.units``), what came, the
    choices."""
    if not isinstance(name, str) or name not in _SYSTEMS:
        raise error(f"{where}: unknown units {name!r}; expected one of {', '.join(UNIT_SYSTEMS)}")
    return name


def same_units(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one unit system (``ase`` and ``angstrom-ev`` do); a name
    that is no unit system is the same only as itself."""
    return _SYSTEMS.get(a, a) == _SYSTEMS.get(b, b)


def unit_factors(
    name: object, where: str = "units", error: type[Exception] = ConfigError
) -> tuple[float, float]:
    """Å per length unit and eV per energy unit of the unit system ``name``
    (:func:`check_units` first)."""
    from ase import units

    length, energy = _SYSTEMS[check_units(name, where, error)]
    return float(getattr(units, length)), float(getattr(units, energy))
