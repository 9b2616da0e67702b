"""Predictions are finite, or an error names the structure and the atom.

A model can predict NaN or infinity (two atoms at one place, a broken weight): the
evaluation and the ASE calculator refuse such a prediction instead of averaging it away
or handing it to an MD integrator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.errors import NonFiniteError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dparallel.types import StructureBatch


def check_finite_predictions(
    out: Mapping[str, Any],
    batch: StructureBatch,
    first: int = 0,
    where: str = "",
    index: np.ndarray | None = None,
) -> None:
    """Raise :class:`NonFiniteError` if a predicted energy, per-atom energy or force is not
    finite; the message names the structure (``index[s]`` of its index ``s`` in ``batch``,
    or ``first + s``: its index in the file) and the atom, with its element and position."""

    def named(s: int) -> int:
        return int(index[s]) if index is not None else first + s

    for key in ("forces", "energies"):
        values = out.get(key)
        if values is None:
            continue
        values = np.asarray(values)
        if np.isfinite(values).all():  # the common case, once per MD step: one pass
            continue
        from ase.data import chemical_symbols

        bad = ~np.isfinite(values.reshape(values.shape[0], -1)).all(axis=1)  # (N,)
        atom = int(np.flatnonzero(bad)[0])
        s = int(np.searchsorted(batch.offsets, atom, side="right")) - 1
        i = atom - int(batch.offsets[s])  # the atom's index in its structure
        element = chemical_symbols[int(batch.numbers[atom])]
        position = np.round(np.asarray(batch.positions[atom], float), 4).tolist()
        what = "force" if key == "forces" else "atomic energy"
        raise NonFiniteError(
            f"{where}structure {named(s)}, atom {i} ({element} at {position} Å): the "
            f"predicted {what} is {values[atom].tolist()}, not finite; atoms at (nearly) "
            "one place, or a model outside what it was trained on"
        )
    energy = out.get("energy")
    if energy is not None and not np.isfinite(energy).all():
        s = int(np.flatnonzero(~np.isfinite(np.asarray(energy, float).reshape(-1)))[0])
        raise NonFiniteError(f"{where}structure {named(s)}: the predicted energy is not finite")
