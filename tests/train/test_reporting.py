"""A split's errors and loss: the objective over the whole split, whatever its batches."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _store_fixture import small_store

from dparallel.train import TrainingSpec
from dparallel.train import train as train_model
from dparallel.train.reporting import Metrics


def _batch(rng: np.random.Generator, n_s: int, n_a: int) -> SimpleNamespace:
    energy = torch.tensor(rng.normal(size=n_s))
    forces = torch.tensor(rng.normal(size=(n_a, 3)))
    energy[0] = float("nan")  # a structure without its energy label
    forces[1] = float("nan")
    counts = torch.tensor(rng.integers(1, 9, n_s), dtype=torch.float64)
    return SimpleNamespace(energy=energy, forces=forces, atom_counts=counts)


def _numpy_loss(batches: list, energies: list, forces: list, w: float) -> float:
    """MSE(energy per atom) + w · MSE(force components) over every labelled entry."""
    pairs = list(zip(batches, energies, forces, strict=True))
    de = np.concatenate([((e - b.energy) / b.atom_counts).numpy() for b, e, _ in pairs])
    df = np.concatenate([(f - b.forces).numpy().ravel() for b, _, f in pairs])
    return float(np.nanmean(de**2) + w * np.nanmean(df**2))


def test_the_loss_is_the_objective_over_the_split_not_a_mean_of_batch_losses(rng) -> None:  # noqa: ANN001
    sizes = [(5, 40), (2, 7), (9, 70)]  # batches of unequal size, as partitions' last ones
    batches = [_batch(rng, s, a) for s, a in sizes]
    energies = [torch.tensor(rng.normal(size=s)) for s, _ in sizes]
    forces = [torch.tensor(rng.normal(size=(a, 3))) for _, a in sizes]
    m = Metrics(force_weight=0.3)
    for b, e, f in zip(batches, energies, forces, strict=True):
        m.add(e, f, b)
    got = m.summary()
    assert got["loss"] == pytest.approx(_numpy_loss(batches, energies, forces, 0.3), rel=1e-12)
    assert got["loss"] == pytest.approx(got["energy_rmse"] ** 2 + 0.3 * got["force_rmse"] ** 2)


def test_a_non_finite_prediction_makes_the_errors_nan(rng) -> None:  # noqa: ANN001
    """A diverged model's NaN energies must not drop out of the errors as unlabelled ones."""
    batch = _batch(rng, 4, 10)
    energy = torch.tensor(rng.normal(size=4))
    energy[2] = float("nan")
    m = Metrics(force_weight=1.0)
    m.add(energy, torch.zeros(10, 3), batch)
    out = m.summary()
    assert math.isnan(out["energy_rmse"]) and math.isnan(out["loss"])
    assert math.isfinite(out["force_rmse"])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return small_store(tmp_path_factory.mktemp("reporting"), n=24, partition_atoms=60)


def test_reported_losses_are_the_objective_at_the_configured_force_weight(store, tmp_path) -> None:  # noqa: ANN001
    """Validation batches end at partitions (sizes differ) and, with force_weight_start, the
    training steps use a falling weight: every reported loss is still E² + w·F² of the
    split's RMSEs at ``force_weight``, so epochs and splits compare."""
    spec = TrainingSpec(epochs=3, hidden=(8,), batch_size=4, seed=7, lr=5e-3,
                        force_weight=0.05, force_weight_start=2.0, schedule="cosine",
                        validation_fraction=0.3, test_fraction=0.2)  # fmt: skip
    res = train_model(store, tmp_path / "m", spec)
    for row in res.history:
        for split in ("train", "validation"):
            e, f = row[f"{split}_energy_rmse"], row[f"{split}_force_rmse"]
            assert row[f"{split}_loss"] == pytest.approx(e**2 + 0.05 * f**2, rel=1e-9), split
    final = json.loads((tmp_path / "m" / "metrics.json").read_text())["final"]
    for split in ("validation", "test"):
        got = final[split]
        e, f = got["energy_rmse_meV_per_atom"] / 1e3, got["force_rmse_meV_per_A"] / 1e3
        assert got["loss"] == pytest.approx(e**2 + 0.05 * f**2, rel=1e-9), split
