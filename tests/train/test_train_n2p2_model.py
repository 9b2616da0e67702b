"""n2p2_compatible training (the networks themselves: tests/nn/test_nn_model.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch
from _store_fixture import small_store

from dparallel.errors import ConfigError, TrainingError
from dparallel.train import TrainingSpec, load_model, parse_training_spec
from dparallel.train import train as train_model

if TYPE_CHECKING:
    from pathlib import Path


def test_n2p2_compatible_training_spec() -> None:
    spec = parse_training_spec({"n2p2_compatible": True, "activation": "logistic"})
    assert spec.n2p2_compatible and spec.activation == "logistic"
    with pytest.raises(ConfigError, match="n2p2 has no activation 'silu'"):
        parse_training_spec({"n2p2_compatible": True, "activation": "silu"})
    with pytest.raises(ConfigError, match="use softplus_n2p2"):
        parse_training_spec({"n2p2_compatible": True, "activation": "softplus"})
    with pytest.raises(ConfigError, match="n2p2 potentials use ACSF"):
        parse_training_spec({"n2p2_compatible": True, "descriptor": "neighbor_sum"})
    with pytest.raises(ConfigError, match="scale_max must differ"):
        parse_training_spec({"scaling": "scale", "scale_min": 1, "scale_max": 1})


@pytest.mark.slow
def test_n2p2_compatible_training_exports(tmp_path: Path) -> None:
    """A model trained with n2p2_compatible and an n2p2 scaling type exports as it is."""
    from dparallel.deploy import DeployedModel
    from dparallel.descriptors import ACSF
    from dparallel.n2p2 import load_potential, write_potential
    from dparallel.types import StructureBatch

    store = small_store(tmp_path, n=12)
    spec = TrainingSpec(
        epochs=2, hidden=(6,), batch_size=4, n2p2_compatible=True, activation="softplus_n2p2",
        scaling="scale", scale_min=-1.0, scale_max=1.0,
    )  # fmt: skip
    train_model(store, tmp_path / "m", spec)
    model, data = load_model(tmp_path / "m", dtype=torch.float64)
    assert model.scaling is not None and model.scaling["mode"] == "scale"
    assert model.feature_offset == -1.0
    acsf = ACSF.from_dict(data["descriptor"])
    write_potential(acsf, model, tmp_path / "n2p2")
    back = load_potential(tmp_path / "n2p2")
    from ase.build import bulk

    atoms = bulk("Cu", "fcc", a=3.6, cubic=True).repeat((2, 2, 2))
    atoms.rattle(0.05, seed=1)
    batch = StructureBatch.from_ase([atoms])
    a = DeployedModel(acsf, model).predict(batch)
    b = DeployedModel(*back).predict(batch)
    np.testing.assert_allclose(b["energy"], a["energy"], rtol=1e-12)
    np.testing.assert_allclose(b["forces"], a["forces"], atol=1e-12)
    mixed = acsf.to_dict()
    mixed["features"]["Cu"][0]["cutoff"] = "poly2"  # n2p2 has one cutoff_type
    from _store_fixture import build_store

    store2 = build_store(tmp_path / "cu12.xyz", tmp_path / "mixed.zarr", ACSF.from_dict(mixed))
    with pytest.raises(TrainingError, match="n2p2_compatible: n2p2 uses one cutoff_type"):
        train_model(store2, tmp_path / "m2", spec)


def test_n2p2_compatible_refuses_functions_n2p2_computes_otherwise(tmp_path: Path) -> None:
    """An angular rs < 0 (n2p2 computes rs = 0) is refused before the first epoch."""
    from _store_fixture import build_store

    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import ACSF

    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.05, 0.0)], narrow=[(0.01, 1.0, -1.0, -0.5)])
    data = write_emt_cu(tmp_path / "cu.xyz", 4, seed=3)
    store = build_store(data, tmp_path / "s.zarr", acsf)
    spec = TrainingSpec(epochs=1, hidden=(4,), batch_size=2, n2p2_compatible=True)
    with pytest.raises(
        TrainingError,
        match=r"n2p2_compatible: symmetry function 1 of Cu \(type 3, Cu-Cu, eta 0.01, rs -0.5, "
        r"zeta 1, lambda -1, rc 4; Å\): n2p2 computes an angular function's rs < 0 as rs = 0",
    ):
        train_model(store, tmp_path / "m", spec)
    assert not (tmp_path / "m" / "model.pt").exists()
