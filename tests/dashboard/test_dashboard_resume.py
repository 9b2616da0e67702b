"""A resumed training run's curves on the training page go on from its earlier epochs.

Before, each run's publisher sent only the epochs it trained: a run resumed at epoch 2
showed curves starting at epoch 2 (epochs 0-1, in metrics.csv, were gone from the page).
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from _event_recorder import cli_train_args

from dparallel.train.reporting import read_history, write_metrics

if TYPE_CHECKING:
    from pathlib import Path

    from dparallel.dashboard import DashboardState

# epochs 0-1 as the interrupted run wrote them (errors in eV/atom, eV/Å, as rows carry them)
EARLIER = [
    {"epoch": 0, "lr": 1e-3, "train_loss": 2.0, "train_energy_rmse": 0.3,
     "train_force_rmse": 0.9, "validation_loss": 2.5, "validation_energy_rmse": 0.35,
     "validation_force_rmse": 1.0, "seconds": 1.0, "data_wait_fraction": 0.5},
    {"epoch": 1, "lr": 1e-3, "train_loss": 1.0, "train_energy_rmse": 0.2,
     "train_force_rmse": 0.6, "validation_loss": 1.5, "validation_energy_rmse": 0.25,
     "validation_force_rmse": 0.7, "seconds": 1.0, "data_wait_fraction": 0.25},
]  # fmt: skip
RESUMED = {"epoch": 2, "train_loss": 0.5, "train_energy_rmse": 0.1, "train_force_rmse": 0.4,
           "validation_loss": 0.9, "validation_energy_rmse": 0.15,
           "validation_force_rmse": 0.5, "data_wait_fraction": 0.125}  # fmt: skip


@pytest.fixture
def state(recorded: DashboardState) -> DashboardState:
    """A dashboard state that every published training event goes to, as the scheduler's."""
    return recorded


def _check_continuous(s: DashboardState) -> None:
    summary = s.train_summary()
    assert summary is not None
    rows = [*EARLIER, RESUMED]
    for split in ("train", "validation"):
        assert summary[split]["epoch"] == [0, 1, 2]
        for metric in ("loss", "energy_rmse", "force_rmse"):
            want = [r[f"{split}_{metric}"] for r in rows]
            assert all(map(math.isclose, summary[split][metric], want)), (split, metric)
    assert summary["data_wait_fraction"] == [0.5, 0.25, 0.125]


def test_read_history_gives_back_the_rows_metrics_json_holds(tmp_path: Path) -> None:
    write_metrics(tmp_path, EARLIER)
    assert json.loads((tmp_path / "metrics.json").read_text())["epochs"][0][
        "train_energy_rmse_meV_per_atom"
    ] == pytest.approx(300.0)  # written in meV, read back in eV
    back = read_history(tmp_path)
    assert [r["epoch"] for r in back] == [0, 1]
    for got, want in zip(back, EARLIER, strict=True):
        assert got.keys() == want.keys()
        assert all(math.isclose(got[k], want[k]) for k in want)
    assert read_history(tmp_path / "missing") == []
    (tmp_path / "metrics.json").write_text("{not json")
    assert read_history(tmp_path) == []


def test_a_publisher_given_the_earlier_epochs_continues_their_curves(state) -> None:  # noqa: ANN001
    from dparallel.dashboard.events import epoch_publisher

    epoch_publisher("run", EARLIER)(RESUMED)
    _check_continuous(state)


def test_dparallel_run_resuming_a_checkpoint_continues_the_curves(
    state,  # noqa: ANN001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dparallel.store
    import dparallel.train
    from dparallel.workflow import run

    write_metrics(tmp_path, EARLIER)
    (tmp_path / "checkpoint.pt").write_bytes(b"")  # resumed: a checkpoint is there

    def fake_train(store: Any, model_dir: Any, spec: Any, *, callback: Any, resume: bool) -> Any:
        assert resume
        for cb in callback:
            cb(RESUMED)
        return SimpleNamespace(validation={}, test={})

    monkeypatch.setattr(dparallel.store, "open_store", lambda path: path)
    monkeypatch.setattr(dparallel.train, "train", fake_train)
    spec = SimpleNamespace(name="quickstart", training=object())
    run._train(spec, "store.zarr", tmp_path, None, False, print)  # type: ignore[arg-type]
    _check_continuous(state)


def test_dparallel_train_resume_continues_the_curves(
    state,  # noqa: ANN001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dparallel.train
    from dparallel.cli import train as cli_train

    write_metrics(tmp_path, EARLIER)

    class Trained(Exception):
        pass

    def fake_train(*args: Any, callback: Any, resume: bool, **kwargs: Any) -> Any:
        assert resume
        for cb in callback:
            cb(RESUMED)
        raise Trained  # the printing after training is not under test

    monkeypatch.setattr(cli_train, "_store_and_descriptors", lambda store, path: (store, None))
    monkeypatch.setattr(dparallel.train, "train", fake_train)
    with pytest.raises(Trained):
        cli_train.run(cli_train_args(tmp_path, resume=True))
    _check_continuous(state)
