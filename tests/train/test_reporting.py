"""A split's errors and loss: the objective over the whole split, whatever its batches."""

from __future__ import annotations

import json
import math
import os
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


@pytest.mark.parametrize("force_weight", [0.0, 1.0])
def test_a_split_without_a_label_of_the_objective_has_no_loss(rng, force_weight) -> None:  # noqa: ANN001
    """Structures without energies (and without forces, or forces untrained) measure
    nothing: the loss is NaN (null in metrics.json), not 0.0, a perfect score."""
    batch = _batch(rng, 3, 6)
    batch.energy[:] = float("nan")
    if force_weight:
        batch.forces[:] = float("nan")
    m = Metrics(force_weight=force_weight)
    m.add(torch.tensor(rng.normal(size=3)), torch.tensor(rng.normal(size=(6, 3))), batch)
    assert math.isnan(m.summary()["loss"])


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


def test_final_errors_equal_numpy_over_the_ase_calculator_on_the_named_structures(
    tmp_path,  # noqa: ANN001
) -> None:
    """metrics.json's final validation and test errors (meV/atom, meV/Å), and ``evaluate
    --split`` on the source file (it had no way to evaluate just a split's structures),
    against numpy over the exported model's ASE predictions on ``validation_ids`` /
    ``test_ids`` of the source file, some structures without an energy and some without
    forces (left out)."""
    import ase.io
    from _store_fixture import build_store, small_acsf
    from ase.calculators.singlepoint import SinglePointCalculator

    from dparallel.ase import Calculator
    from dparallel.cli.evaluate import evaluate_file
    from dparallel.datasets import write_emt_cu
    from dparallel.errors import InputError
    from dparallel.train.export import export_model

    frames = ase.io.read(write_emt_cu(tmp_path / "cu.xyz", 20, seed=4), ":")
    labels = []
    for k, atoms in enumerate(frames):
        energy = None if k % 5 == 1 else atoms.get_potential_energy()
        forces = None if k % 3 == 2 else atoms.get_forces()
        atoms.calc = SinglePointCalculator(atoms, energy=energy, forces=forces)
        labels.append((energy, forces))
    ase.io.write(tmp_path / "some.xyz", frames, format="extxyz")
    store = build_store(tmp_path / "some.xyz", tmp_path / "s.zarr", small_acsf())
    spec = TrainingSpec(epochs=1, hidden=(6,), batch_size=4, seed=2, lr=5e-3,
                        validation_fraction=0.3, test_fraction=0.3)  # fmt: skip
    train_model(store, tmp_path / "m", spec)
    export_model(tmp_path / "m", artifacts=False)
    doc = json.loads((tmp_path / "m" / "metrics.json").read_text())
    calc = Calculator(tmp_path / "m")
    for split in ("validation", "test"):
        de, df = [], []
        for i in doc[f"{split}_ids"]:
            atoms, (energy, forces) = frames[i].copy(), labels[i]
            atoms.calc = calc
            if energy is not None:
                de.append((atoms.get_potential_energy() - energy) / len(atoms))
            if forces is not None:
                df.append((atoms.get_forces() - forces).ravel())
        e, f = 1e3 * np.array(de), 1e3 * np.concatenate(df)
        assert len(de) < len(doc[f"{split}_ids"]) or len(df) < len(doc[f"{split}_ids"])
        got = doc["final"][split]
        assert got["energy_rmse_meV_per_atom"] == pytest.approx(np.sqrt(np.mean(e**2)), 1e-6)
        assert got["energy_mae_meV_per_atom"] == pytest.approx(np.mean(np.abs(e)), 1e-6)
        assert got["force_rmse_meV_per_A"] == pytest.approx(np.sqrt(np.mean(f**2)), 1e-6)
        assert got["force_mae_meV_per_A"] == pytest.approx(np.mean(np.abs(f)), 1e-6)
        some = str(tmp_path / "some.xyz")
        ran = evaluate_file(str(tmp_path / "m"), some, batch=2, split=split)
        assert ran["n_structures"] == len(doc[f"{split}_ids"])
        assert 1e3 * ran["energy_rmse"] == pytest.approx(np.sqrt(np.mean(e**2)), 1e-9)
        assert 1e3 * ran["energy_mae"] == pytest.approx(np.mean(np.abs(e)), 1e-9)
        assert 1e3 * ran["force_rmse"] == pytest.approx(np.sqrt(np.mean(f**2)), 1e-9)
        assert 1e3 * ran["force_mae"] == pytest.approx(np.mean(np.abs(f)), 1e-9)
    ase.io.write(tmp_path / "fewer.xyz", frames[:-1], format="extxyz")  # not the source file
    with pytest.raises(InputError, match="indices of the file its store was made from"):
        evaluate_file(str(tmp_path / "m"), str(tmp_path / "fewer.xyz"), split="test")
    doc["test_ids"] = []  # as test_fraction 0 leaves it: not "no energies and no forces"
    (tmp_path / "m" / "metrics.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="its test split is empty"):
        evaluate_file(str(tmp_path / "m"), some, split="test")


def test_learning_curves_of_a_zero_force_error_plot_without_a_warning(tmp_path) -> None:  # noqa: ANN001
    """Structures of one atom each: forces are exactly 0 on both sides, a force RMSE of 0
    has no logarithm (matplotlib warned 'Data has no positive values' on every run)."""
    import warnings

    from dparallel.train.reporting import plot_learning_curves

    history = [
        {"epoch": k, "train_loss": 0.1, "train_energy_rmse": 0.01, "train_force_rmse": 0.0}
        for k in range(3)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # not ours: matplotlib 3.8's mathtext calls pyparsing 3.3's deprecated names
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        path = plot_learning_curves(history, tmp_path / "curves.png")
    assert path.stat().st_size > 0


def test_a_folder_without_metrics_json_says_it_records_no_split(tmp_path):
    """An n2p2 potential (exported or not) has no metrics.json: the message says that
    only the training run's directory records the split (it said 'metrics.json: no
    test_ids' of a file that is not there)."""
    from dparallel.errors import TrainingError
    from dparallel.train.reporting import split_ids

    (tmp_path / "input.nn").write_text("")
    with pytest.raises(TrainingError, match=r"no metrics.json, so no test split to evaluate"):
        split_ids(tmp_path, "test")


_PLOTS = """
import os
from dparallel.train.reporting import _pyplot
_pyplot()
print(os.environ.get("MPLCONFIGDIR"))
"""


def test_matplotlib_under_a_home_it_cannot_write_uses_dparallels_cache(tmp_path):
    """It warned on every training ('Matplotlib created a temporary cache directory ...')
    and rebuilt its font cache; it gets dparallel's cache folder, silently."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "MPLCONFIGDIR"}
    env.update(XDG_CACHE_HOME="/proc/dparallel-none", XDG_CONFIG_HOME="/proc/dparallel-none",
               DPARALLEL_CACHE_DIR=str(tmp_path / "cache"))  # fmt: skip
    done = subprocess.run([sys.executable, "-c", _PLOTS], env=env, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    assert "Matplotlib" not in done.stderr and "mkdir" not in done.stderr, done.stderr
    assert done.stdout.strip() == str(tmp_path / "cache" / "matplotlib")
