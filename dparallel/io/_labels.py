"""Labels an extxyz frame holds where dparallel does not read them, said once per file.

By default dparallel reads the energy from ``energy``, else ``REF_energy``, and the forces
from the ``forces``, else ``REF_forces`` column (docs/io.md; ``types.ENERGY_KEYS``,
``FORCE_KEYS``). A file that keeps its reference labels under another key
(``free_energy``, ``dft_energy``, a ``force`` column) is stored without them unless
``energy_key`` / ``forces_key`` name it, and one with both ``energy`` and a different
``REF_energy`` has its ``energy`` stored: legal, but not always what the user meant, so
the first such frame of a file is logged with the option that fixes it. A key chosen is
never warned about (a structure without it is an error: ``types.LabelKeys``).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from dparallel.types import LabelKeys

__all__ = ["is_real", "report_unread", "unread_label"]

log = logging.getLogger(__name__)

_LOCK = threading.Lock()
_SAID: set[tuple[str, str]] = set()  # (file, kind) this process has reported


def is_real(value: object) -> bool:
    """A real number (not a bool, which ASE makes of ``energy=T``, nor a string)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def unread_label(
    info: Mapping[str, Any], columns: Collection[str], keys: LabelKeys
) -> tuple[str, str] | None:
    """``(kind, what and the fix)`` when a frame's comment ``info`` or its ``Properties``
    ``columns`` hold a label dparallel does not read with the default ``keys``, or two
    energies that disagree; else ``None``. Cheap where the labels are the usual ones (a
    few dict lookups)."""
    energy, ref = info.get("energy"), info.get("REF_energy")
    if keys.energy is None and is_real(energy) and is_real(ref) and energy != ref:
        return "both", (
            f"both energy={energy:g} and REF_energy={ref:g}: dparallel reads energy. If "
            "REF_energy is the reference (e.g. energy is a model's prediction), choose it "
            f"with {_OPTION.format(kind='energy', key='REF_energy')}"
        )
    if keys.energy is None and energy is None and ref is None:
        other = [k for k, v in info.items() if "energy" in k.lower() and is_real(v)]
        if other:
            return "energy", (
                f"{other[0]}={info[other[0]]:g} is not read as the energy (only energy or "
                "REF_energy are by default): structures like this one are stored without "
                "energy. If it is the reference energy, choose it with "
                + _OPTION.format(kind="energy", key=other[0])
            )
    if keys.forces is None and not any(name in columns for name in keys.force_keys()):
        other = [name for name in columns if "force" in name.lower()]
        if other:
            return "forces", (
                f"column {other[0]!r} is not read as the forces (only forces or REF_forces "
                "are by default): structures like this one are stored without forces. If it "
                f"holds the reference forces, choose it with "
                + _OPTION.format(kind="forces", key=other[0])
            )
    return None


#: How a message names the option that chooses a label's key, everywhere it is given.
_OPTION = (
    "{kind}_key={key} (--{kind}-key {key} on ingest, featurize and evaluate; "
    "dataset.{kind}_key in a workflow)"
)


def report_unread(path: object, line: int, frame: int, kind: str, message: str) -> None:
    """Log ``message`` for the frame at ``line`` of ``path``, once per file and kind per
    process (every later frame of the file is read the same way)."""
    with _LOCK:
        if (str(path), kind) in _SAID:
            return
        _SAID.add((str(path), kind))
    log.warning("%s, line %d, structure %d: %s (docs/io.md)", path, line, frame, message)
