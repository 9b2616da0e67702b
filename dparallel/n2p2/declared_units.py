"""The units an n2p2 potential directory declares, and which to use when loading it.

n2p2's own files do not record units; an ``input.nn`` written by dparallel says them in a
``# Units: NAME (…)`` comment (:func:`~dparallel.n2p2.potential.write_potential`). A
declaration is used by default and a contradicting ``units`` is an error, never a silent
rescaling.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from dparallel.errors import ConfigError
from dparallel.io.units import UNIT_SYSTEMS, same_units

if TYPE_CHECKING:
    import os

__all__ = ["declared_units", "potential_units"]

_DECLARATION = re.compile(r"#\s*Units:\s*([A-Za-z-]+)")


def _input_nn(where: str | os.PathLike[str]) -> Path:
    """``where/input.nn`` for a folder, else ``where`` (an input.nn of any name)."""
    return Path(where) / "input.nn" if Path(where).is_dir() else Path(where)


def declared_units(directory: str | os.PathLike[str]) -> str | None:
    """The units ``directory/input.nn`` (or the input.nn ``directory`` is) declares
    (``# Units: …``), or ``None``."""
    try:
        with open(_input_nn(directory), encoding="utf-8", errors="replace") as f:
            for line in f:
                match = _DECLARATION.match(line.strip())
                if match and match.group(1) in UNIT_SYSTEMS:
                    return match.group(1)
                if line.strip() and not line.startswith("#"):
                    return None  # the declaration is in the header comments
    except OSError:
        return None
    return None


def potential_units(directory: str | os.PathLike[str], given: str | None, default: str) -> str:
    """Units to load the potential in ``directory`` (or its input.nn) with.

    ``given`` (an explicit choice) must agree with a declaration; without one, the
    declaration is used, else ``default`` (e.g. the units of the data it is used on).

    Raises
    ------
    ConfigError
        ``given`` contradicts the units ``input.nn`` declares.
    """
    declared = declared_units(directory)
    if given is None:
        return declared or default
    if declared is not None and not same_units(given, declared):
        raise ConfigError(
            f"{_input_nn(directory)} declares units {declared}, but {given} was "
            f"given: drop the units option to use {declared}, or fix the potential"
        )
    return given
