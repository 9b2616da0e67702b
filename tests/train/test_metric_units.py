"""Units in written metric names: eV → meV with the unit in the key, and back."""

from __future__ import annotations

import pytest

from dparallel.train.metric_units import with_units, without_units


def test_units_by_hand_and_round_trip() -> None:
    row = {
        "epoch": 3,
        "lr": 0.01,
        "train_loss": 2.5,
        "train_energy_rmse": 0.0021,  # eV/atom
        "validation_force_mae": 0.045,  # eV/Å
        "seconds": 1.5,
        "energy_mae": None,
    }
    out = with_units(row)
    assert out["train_energy_rmse_meV_per_atom"] == pytest.approx(2.1)
    assert out["validation_force_mae_meV_per_A"] == pytest.approx(45.0)
    assert out["energy_mae_meV_per_atom"] is None
    assert {k: out[k] for k in ("epoch", "lr", "train_loss", "seconds")} == {
        "epoch": 3,
        "lr": 0.01,
        "train_loss": 2.5,
        "seconds": 1.5,
    }
    back = without_units(out)
    assert back.keys() == row.keys()
    assert back["train_energy_rmse"] == pytest.approx(0.0021)
    assert back["validation_force_mae"] == pytest.approx(0.045)
