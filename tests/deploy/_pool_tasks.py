"""Functions a multiprocessing pool runs in the deployment tests (importable by its workers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def predict_energies(model: Any, frames: list) -> np.ndarray:
    """``model.predict(frames)``'s energies, in the pool's process."""
    return model.predict(frames, stress=True)["energy"]


def calculator_energy(calc: Any, atoms: Any) -> float:
    """The energy ``calc`` gives ``atoms`` in the pool's process."""
    atoms.calc = calc
    return float(atoms.get_potential_energy())
