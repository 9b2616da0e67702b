"""Accuracy on the EMT Cu dataset (issue 6), in a configuration that fits the test budget.

The full target (held-out energy RMSE ≤ 2 meV/atom, force RMSE ≤ 60 meV/Å with the
default TrainingSpec, 300 epochs, ~2 min: 1.91 meV/atom, 43 meV/Å) is printed by
benchmarks/bench_train.py. Here the
same dataset (400 structures), descriptors (``cu_acsf()``) and spec train for 100 epochs
(cosine schedule over 100 epochs) — a third of the time. Measured: 2.8 meV/atom and
66 meV/Å; we assert 5 meV/atom and 90 meV/Å, which is 20× (energy) and 12× (forces)
better than the trivial model (per-element reference energies, zero forces: 100 meV/atom,
1100 meV/Å RMS on this dataset), so a broken force path or loader fails it.
"""

from __future__ import annotations

import pytest
from _store_fixture import build_store

from dparallel.datasets import write_emt_cu
from dparallel.train import TrainingSpec, cu_acsf, train


@pytest.mark.slow
def test_emt_cu_accuracy(tmp_path) -> None:  # noqa: ANN001
    data = write_emt_cu(tmp_path / "cu400.xyz", 400)
    store = build_store(data, tmp_path / "cu.zarr", cu_acsf(), partition_atoms=2000)
    spec = TrainingSpec(epochs=100)
    result = train(store, tmp_path / "model", spec)
    print("test errors after 100 epochs:", result.test)  # shown with pytest -s
    assert result.test["energy_rmse"] < 5e-3, result.test
    assert result.test["force_rmse"] < 0.090, result.test
