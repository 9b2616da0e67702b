"""What the dashboard pages send the browser each tick: only what changed.

Before, every 0.5 s tick set every column again, and bokeh sent the whole curves to each
open page (a long run's, twice a second, even after it had ended).
"""

from __future__ import annotations

import pytest

pytest.importorskip("bokeh")

from bokeh.document import Document
from bokeh.document.events import ColumnDataChangedEvent, ColumnsStreamedEvent

import dparallel.dashboard.pages as pages
from dparallel.dashboard import DashboardState
from dparallel.dashboard.events import (
    TOPIC_PROGRESS,
    TOPIC_TRAIN,
    progress_partition_event,
    progress_start_event,
    train_event,
)


def _epoch(s: DashboardState, epoch: int, run_id: str = "a") -> None:
    for split in ("train", "validation"):  # no energy RMSE: NaN in the page's columns
        s.add(float(epoch), TOPIC_TRAIN, train_event("t", epoch, split, 1.0 / (epoch + 1), None,
                                                     0.2, run_id=run_id))  # fmt: skip


def _watched(page_cls: type, s: DashboardState, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """The page in a document, and the list of every change sent to its browser."""
    monkeypatch.setattr(pages, "state_of", lambda scheduler: s)
    page = page_cls(None)
    page.update()
    doc = Document()
    doc.add_root(page.root)
    sent: list = []
    doc.on_change(sent.append)
    return page, sent


def test_training_page_sends_nothing_idle_and_only_new_epochs(monkeypatch) -> None:  # noqa: ANN001
    s = DashboardState()
    for epoch in range(50):
        _epoch(s, epoch)
    page, sent = _watched(pages._TrainingPage, s, monkeypatch)
    for _ in range(5):
        page.update()
    assert sent == []  # nothing new: nothing sent

    _epoch(s, 50)
    page.update()
    streamed = [e for e in sent if isinstance(e, ColumnsStreamedEvent)]
    assert len(streamed) == 2 and not [e for e in sent if isinstance(e, ColumnDataChangedEvent)]
    for event in streamed:
        assert event.data["epoch"] == [50] and event.data["loss"] == [pytest.approx(1 / 51)]
    assert page.sources["train"].data["epoch"] == list(range(51))

    sent.clear()  # a new run of the same name: its curves replace the old ones
    _epoch(s, 0, run_id="b")
    page.update()
    assert any(isinstance(e, ColumnDataChangedEvent) for e in sent)
    assert page.sources["train"].data["epoch"] == [0]
    assert page.sources["validation"].data["epoch"] == [0]


def test_progress_page_sends_nothing_idle(monkeypatch) -> None:  # noqa: ANN001
    s = DashboardState()
    s.add(0.0, TOPIC_PROGRESS, progress_start_event("r", 3, 30, 300))
    s.add(1.0, TOPIC_PROGRESS, progress_partition_event("r", 0, 10, 100, 1.0, "w0"))
    page, sent = _watched(pages._ProgressPage, s, monkeypatch)
    for _ in range(5):
        page.update()
    assert sent == []

    s.add(2.0, TOPIC_PROGRESS, progress_partition_event("r", 1, 10, 100, 1.0, "w1"))
    page.update()
    assert page.bar_source.data["done"] == [2.0]
    assert page.worker_source.data["worker"] == ["w0", "w1"]
    assert "<b>2</b> / 3 partitions" in page.header.text


def test_refresh_treats_nan_as_unchanged_and_replaces_a_changed_row() -> None:
    from bokeh.models import ColumnDataSource

    source = ColumnDataSource({"x": [0, 1], "y": [float("nan"), 2.0]})
    doc = Document()
    doc.add_root(source)
    sent: list = []
    doc.on_change(sent.append)
    pages.refresh(source, {"x": [0, 1], "y": [float("nan"), 2.0]})
    assert sent == []
    pages.refresh(source, {"x": [0, 1], "y": [1.0, 2.0]})  # an earlier row changed
    assert len(sent) == 1 and source.data["y"] == [1.0, 2.0]
