"""The training page's data-wait share: from an epoch row to the dashboard state and page."""

from __future__ import annotations

from _event_recorder import EventRecorder

from dparallel.dashboard import DashboardState, publish_train_metrics
from dparallel.dashboard.events import TOPIC_TRAIN


def test_data_wait_fraction_reaches_the_training_summary() -> None:
    rec = EventRecorder()
    publish_train_metrics("t", 1, "train", 0.5, 0.02, 0.1, data_wait_fraction=0.25, target=rec)
    publish_train_metrics("t", 0, "train", 0.9, 0.03, 0.2, data_wait_fraction=0.5, target=rec)
    publish_train_metrics("t", 0, "validation", 1.0, target=rec)
    assert rec.events[0][1]["data_wait_fraction"] == 0.25
    assert "data_wait_fraction" not in rec.events[2][1]
    s = DashboardState()
    for i, (topic, msg) in enumerate(rec.events):
        assert topic == TOPIC_TRAIN
        s.add(float(i), topic, msg)
    summary = s.train_summary()
    assert summary is not None
    assert summary["data_wait_fraction"] == [0.5, 0.25]  # by epoch
    assert "data_wait_fraction" not in summary["train"]


def test_the_epoch_publisher_sends_the_row_s_data_wait(recorded) -> None:  # noqa: ANN001
    import dparallel.dashboard.events as tp

    tp.epoch_publisher("run")(
        {"epoch": 3, "train_loss": 1.0, "validation_loss": 2.0, "data_wait_fraction": 0.125}
    )
    assert recorded.train_summary()["data_wait_fraction"] == [0.125]  # type: ignore[index]


def test_the_training_page_shows_the_data_wait(monkeypatch) -> None:  # noqa: ANN001
    import pytest

    pytest.importorskip("bokeh")
    import dparallel.dashboard.pages as pages

    s = DashboardState()
    rec = EventRecorder()
    publish_train_metrics("t", 0, "train", 0.9, data_wait_fraction=0.031, target=rec)
    s.add(0.0, *rec.events[0])
    monkeypatch.setattr(pages, "state_of", lambda scheduler: s)
    page = pages._TrainingPage(None)
    page.update()
    assert "waiting for data 3.1% of the last epoch" in page.header.text
