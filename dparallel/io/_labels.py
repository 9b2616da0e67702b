"""Labels an extxyz frame holds where dparallel does not read them, said once per file.

dparallel reads the energy from ``energy``, else ``REF_energy``, and the forces from the
``forces``, else ``REF_forces`` column (docs/io.md; ``types.ENERGY_KEYS``, ``FORCE_KEYS``).
A file that keeps its reference labels under another key (``free_energy``, ``dft_energy``,
a ``force`` column) is stored without them, and one with both ``energy`` and a different
``REF_energy`` has its ``energy`` stored: legal, but not always what the user meant, so
the first such frame of a file is logged with the fix.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.types import FORCE_KEYS

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

__all__ = ["is_real", "report_unread", "unread_label"]

log = logging.getLogger(__name__)

_LOCK = threading.Lock()
_SAID: set[tuple[str, str]] = set()  # (file, kind) this process has reported


def is_real(value: object) -> bool:
    """A real number (not a bool, which ASE makes of ``energy=T``, nor a string)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def unread_label(info: Mapping[str, Any], columns: Collection[str]) -> tuple[str, str] | None:
    """``(kind, what and the fix)`` when a frame's comment ``info`` or its ``Properties``
    ``columns`` hold a label dparallel does not read, or two energies that disagree; else
    ``None``. Cheap where the labels are the usual ones (a few dict lookups)."""
    energy, ref = info.get("energy"), info.get("REF_energy")
    if is_real(energy) and is_real(ref) and energy != ref:
        return "both", (
            f"both energy={energy:g} and REF_energy={ref:g}: dparallel reads energy. If "
            "REF_energy is the reference (e.g. energy is a model's prediction), rename "
            "energy in the file (e.g. to model_energy)"
        )
    if energy is None and ref is None:
        other = [k for k, v in info.items() if "energy" in k.lower() and is_real(v)]
        if other:
            return "energy", (
                f"{other[0]}={info[other[0]]:g} is not read as the energy (only energy or "
                "REF_energy are): structures like this one are stored without energy. If it "
                f"is the reference energy, rename {other[0]} to energy in the file"
            )
    if not any(name in columns for name in FORCE_KEYS):
        other = [name for name in columns if "force" in name.lower()]
        if other:
            return "forces", (
                f"column {other[0]!r} is not read as the forces (only forces or REF_forces "
                "are): structures like this one are stored without forces. If it holds the "
                f"reference forces, rename {other[0]} to forces in the Properties of the file"
            )
    return None


def report_unread(path: object, line: int, frame: int, kind: str, message: str) -> None:
    """Log ``message`` for the frame at ``line`` of ``path``, once per file and kind per
    process (every later frame of the file is read the same way)."""
    with _LOCK:
        if (str(path), kind) in _SAID:
            return
        _SAID.add((str(path), kind))
    log.warning("%s, line %d, structure %d: %s (docs/io.md)", path, line, frame, message)
