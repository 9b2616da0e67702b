"""A training run shows on the page from its start, so one that fails before its first
epoch says that it failed, and why.

Before, a training run appeared with its first epoch's metrics: a run refused before it
(an incomplete store, a bad setting, a first epoch that diverged) showed nothing, and the
page kept the previous run's curves marked finished, or "no training run reported yet".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from _event_recorder import cli_train_args, shown_page

from dparallel.errors import ConfigError, StoreError, TrainingError

if TYPE_CHECKING:
    from pathlib import Path

    from dparallel.dashboard import DashboardState

ROW = {"epoch": 0, "train_loss": 1.0, "validation_loss": 1.5}
REFUSED = "store.zarr is incomplete: 3 of 4 partitions. Finish it"


def _header(s: DashboardState, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict]:
    """The training page's header text and its train curve's columns."""
    page = shown_page("_TrainingPage", s, monkeypatch)
    return str(page.header.text), dict(page.sources["train"].data)


def _refused(*args: object, callback: list, **kwargs: object) -> None:
    raise TrainingError(REFUSED)  # before any epoch: no row reaches the callbacks


def test_a_run_failing_before_its_first_epoch_replaces_the_last_ones_curves(
    recorded: DashboardState, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dparallel.dashboard.events as events

    done = events.epoch_publisher("m")
    with done.ending():
        done(ROW)
    header, cols = _header(recorded, monkeypatch)
    assert "<b>finished</b>" in header and cols["epoch"] == [0]

    new = events.epoch_publisher("m")  # started: the page is this run's, with no epochs
    summary = recorded.train_summary()
    assert summary is not None and summary["outcome"] == "running"
    assert summary["train"]["epoch"] == [] and summary["validation"]["epoch"] == []
    header, cols = _header(recorded, monkeypatch)
    assert "finished" not in header and "no epoch yet" in header and cols["epoch"] == []

    with pytest.raises(TrainingError), new.ending():
        _refused(callback=[new])
    summary = recorded.train_summary()
    assert summary is not None and summary["run"] == "m" and summary["outcome"] == "failed"
    assert summary["error"] == f"TrainingError: {REFUSED}"
    header, cols = _header(recorded, monkeypatch)
    assert f"failed</b>: TrainingError: {REFUSED}" in header and cols["epoch"] == []
    assert recorded.to_json()["train"]["outcome"] == "failed"


def test_dparallel_train_shows_a_bad_setting_and_a_store_it_cannot_open(
    recorded: DashboardState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run is announced before its settings are read and its store opened."""
    from dparallel.cli import train as cli_train

    args = cli_train_args(tmp_path, resume=False)
    args.overrides = ["epochs=-3"]
    with pytest.raises(ConfigError):
        cli_train.run(args)
    summary = recorded.train_summary()
    assert summary is not None and summary["outcome"] == "failed"
    assert "ConfigError" in summary["error"] and "epochs" in summary["error"]

    args = cli_train_args(tmp_path, resume=False)
    args.store = str(tmp_path / "absent.zarr")
    with pytest.raises(StoreError):
        cli_train.run(args)
    summary = recorded.train_summary()
    assert summary is not None and summary["outcome"] == "failed"
    assert "absent.zarr" in summary["error"]


def test_dparallel_run_shows_a_store_it_cannot_open(
    recorded: DashboardState, tmp_path: Path
) -> None:
    """``dparallel run`` opens the store for training after announcing the run."""
    from types import SimpleNamespace

    from dparallel.workflow import run

    spec = SimpleNamespace(name="quickstart", training=object())
    with pytest.raises(StoreError):
        run._train(spec, tmp_path / "absent.zarr", tmp_path, None, False, print)  # type: ignore[arg-type]
    summary = recorded.train_summary()
    assert summary is not None and summary["run"] == "quickstart"
    assert summary["outcome"] == "failed" and "absent.zarr" in summary["error"]
