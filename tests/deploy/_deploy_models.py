"""Model directories and structures for the deployment tests (no training needed).

The weights are torch's random initialisation with random descriptor scaling: the tests
compare two implementations of the same function, so any smooth function will do, and a
random one exercises every feature column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from dparallel.descriptors import ACSF, NeighborSum
from dparallel.train import HDNNP, TrainingSpec
from dparallel.train.checkpoints import model_file

if TYPE_CHECKING:
    from pathlib import Path

ELEMENTS = ["H", "C", "O"]


def hco_acsf() -> ACSF:
    """Three elements; radial (type 2), narrow (type 3, one with rs ≠ 0) and wide (type 9)."""
    return ACSF.uniform(
        ELEMENTS,
        r_cut=3.5,
        cutoff="poly2",
        alpha=0.1,
        radial=[(0.5, 0.0), (1.0, 1.2)],
        narrow=[(0.05, 1.0, -1.0, 0.0), (0.1, 2.0, 1.0, 0.5)],
        wide=[(0.02, 1.0, 1.0, 0.0), (0.1, 3.0, -1.0, 0.3)],
    )


def hco_neighbor_sum() -> NeighborSum:
    """HIP-NN sensitivities for the same elements."""
    return NeighborSum(ELEMENTS, r_cut=3.5, n_sensitivities=5, r_min=0.7)


def write_model_dir(path: Path, descriptor: ACSF | NeighborSum, seed: int = 0) -> Path:
    """``path/model.pt`` as ``dparallel train`` writes it, with random weights and scaling."""
    kind = "acsf" if isinstance(descriptor, ACSF) else "neighbor_sum"
    n_features = {
        e: descriptor.n_features(e) if kind == "acsf" else descriptor.n_features for e in ELEMENTS
    }
    torch.manual_seed(seed)
    model = HDNNP(ELEMENTS, n_features, hidden=(8, 8)).double()
    rng = np.random.default_rng(seed)
    for e in ELEMENTS:
        model.set_scaling(e, rng.uniform(0, 1, n_features[e]), rng.uniform(0.5, 2, n_features[e]))
    model.ref_energy.copy_(torch.tensor([-13.6, -1030.0, -2040.0]))
    model.energy_scale.fill_(0.3)
    path.mkdir(parents=True, exist_ok=True)
    spec = TrainingSpec(descriptor=kind)
    torch.save(model_file(model, spec, descriptor.to_dict()), path / "model.pt")
    return path


def structures() -> dict[str, object]:
    """A triclinic periodic cell smaller than twice the cutoff, a molecule, a lone atom."""
    import ase
    from ase.build import molecule

    rng = np.random.default_rng(5)
    cell = np.array([[3.1, 0.0, 0.0], [0.6, 2.9, 0.0], [0.3, -0.4, 3.3]])
    periodic = ase.Atoms(
        "HCOCHO",
        scaled_positions=rng.uniform(0, 1, (6, 3)),
        cell=cell,
        pbc=True,
    )
    periodic.positions += rng.normal(0, 0.05, (6, 3))
    mol = molecule("CH3CH2OH")
    mol.rattle(0.05, seed=2)
    mol.pbc = False
    lone = ase.Atoms("O", positions=[[0.1, 0.2, 0.3]])
    return {"periodic": periodic, "molecule": mol, "lone atom": lone}
