"""Accuracy on the EMT Cu dataset (issue 6), in a configuration that fits the test budget.

The full target (held-out energy RMSE ≤ 2 meV/atom, force RMSE ≤ 60 meV/Å) is reached by
the default TrainingSpec in 300 epochs (~2 min: 1.67 meV/atom, 43.5 meV/Å), printed by
benchmarks/bench_train.py. Here the same dataset (400 structures), descriptors
(the quickstart workflow's ACSF) and spec train for 100 epochs (cosine schedule over 100
epochs), a third
of the time. Measured: 2.2 meV/atom and 63 meV/Å; we assert 3.5 meV/atom and 80 meV/Å
(margin for other BLAS/torch builds), ~30× (energy) and ~14× (forces) better than the
trivial model (per-element reference energies, zero forces: 100 meV/atom and 1100 meV/Å
RMS on this dataset), so a broken force path or loader fails it.
"""

from __future__ import annotations

import pytest
from _store_fixture import build_store

from dparallel.datasets import write_emt_cu
from dparallel.train import TrainingSpec, train
from dparallel.workflow.spec import load_quickstart


@pytest.mark.slow
def test_emt_cu_accuracy(tmp_path) -> None:  # noqa: ANN001
    data = write_emt_cu(tmp_path / "cu400.xyz", 400)
    store = build_store(
        data, tmp_path / "cu.zarr", load_quickstart().descriptors.build().acsf, partition_atoms=2000
    )
    spec = TrainingSpec(epochs=100)
    result = train(store, tmp_path / "model", spec)
    print("test errors after 100 epochs:", result.test)  # shown with pytest -s
    assert result.test["energy_rmse"] < 3.5e-3, result.test
    assert result.test["force_rmse"] < 0.080, result.test
