"""ASE calculator for exported dparallel models: ``Calculator(MODEL_DIR)``.

This module is ``dparallel.ase``; it imports the ``ase`` package absolutely.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import ase
import ase.calculators.calculator as _calc
import numpy as np
import torch
from ase.stress import full_3x3_to_voigt_6_stress

from dparallel.train.export import DEPLOYED, DeployedModel, load_deployed
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    import os

__all__ = ["Calculator"]


class Calculator(_calc.Calculator):
    """Energy, forces and stress (3-D periodic cells) from ``MODEL_DIR/deployed.pt``.

    Parameters
    ----------
    model_dir
        Directory written by ``dparallel train`` and ``dparallel export`` (or the
        ``deployed.pt`` file itself).
    dtype
        ``torch.float64`` (default) or ``torch.float32``.
    backend
        ACSF backend for the descriptors: ``"auto"``, ``"numba"`` or ``"torch"``.
    units
        Only for an n2p2 potential directory (``input.nn``, ``scaling.data``,
        ``weights.XXX.data``): the units it was made in (``"ase"`` or ``"bohr-hartree"``).
    """

    # ASE declares it an instance attribute, so it cannot be a ClassVar here.
    implemented_properties = ["energy", "free_energy", "energies", "forces", "stress"]  # noqa: RUF012

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        dtype: torch.dtype = torch.float64,
        backend: str = "auto",
        units: str = "ase",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        path = Path(model_dir)
        from dparallel.n2p2 import is_potential_dir, load_potential

        if is_potential_dir(path):  # an n2p2 potential: (ACSF, HDNNP) from its files
            self.model = DeployedModel(*load_potential(path, units=units), dtype)
        else:
            self.model = load_deployed(path if path.suffix == ".pt" else path / DEPLOYED, dtype)
        self.backend = backend

    def calculate(
        self,
        atoms: ase.Atoms | None = None,
        properties: list[str] | None = None,
        system_changes: list[str] = _calc.all_changes,
    ) -> None:
        """Compute the requested properties (all cheap ones at once)."""
        properties = properties or ["energy"]
        super().calculate(atoms, properties, system_changes)
        assert self.atoms is not None
        batch = StructureBatch.from_ase([self.atoms])
        want_stress = "stress" in properties
        if want_stress and not all(self.atoms.pbc):
            raise _calc.PropertyNotImplementedError("stress needs a 3-D periodic cell")
        out = self.model.predict(batch, forces=True, stress=want_stress, backend=self.backend)
        energy = float(out["energy"][0])
        self.results["energy"] = energy
        self.results["free_energy"] = energy
        self.results["energies"] = out["energies"]
        self.results["forces"] = out["forces"]
        if want_stress:
            self.results["stress"] = full_3x3_to_voigt_6_stress(np.asarray(out["stress"][0]))
