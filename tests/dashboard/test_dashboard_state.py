"""Pure aggregation of dashboard events, and the event payload helpers."""

from __future__ import annotations

import pytest
from _event_recorder import EventRecorder

from dparallel.dashboard import DashboardState, publish_progress, publish_train_metrics
from dparallel.dashboard.events import (
    TOPIC_PROGRESS,
    TOPIC_TRAIN,
    end_event,
    progress_partition_event,
    progress_start_event,
    train_event,
)


def _progress_state() -> DashboardState:
    s = DashboardState()
    s.add(100.0, TOPIC_PROGRESS, progress_start_event("run-a", 4, 40, 400))
    s.add(102.0, TOPIC_PROGRESS, progress_partition_event("run-a", 0, 10, 100, 2.0, "w1"))
    s.add(103.0, TOPIC_PROGRESS, progress_partition_event("run-a", 1, 12, 120, 3.0, "w2"))
    s.add(105.0, TOPIC_PROGRESS, progress_partition_event("run-a", 2, 8, 80, 1.0, "w1"))
    return s


def test_progress_summary_by_hand() -> None:
    p = _progress_state().progress_summary()
    assert p is not None
    assert (p["partitions_done"], p["partitions_total"]) == (3, 4)
    assert (p["structures_done"], p["structures_total"], p["atoms_done"]) == (30, 40, 300)
    assert p["elapsed_seconds"] == pytest.approx(5.0)
    assert p["structures_per_second"] == pytest.approx(30 / 5)
    assert p["eta_seconds"] == pytest.approx(10 / 6)
    assert p["complete"] is False
    assert p["workers"]["w1"] == {
        "partitions": 2,
        "structures": 18,
        "seconds": 3.0,
        "structures_per_second": 6.0,
    }
    assert p["workers"]["w2"]["structures_per_second"] == pytest.approx(4.0)


def test_repeated_partition_replaces_and_new_start_resets() -> None:
    s = _progress_state()
    s.add(106.0, TOPIC_PROGRESS, progress_partition_event("run-a", 2, 8, 80, 1.5, "w2"))
    p = s.progress_summary()
    assert p["partitions_done"] == 3 and p["structures_done"] == 30
    assert p["workers"]["w1"]["partitions"] == 1
    s.add(107.0, TOPIC_PROGRESS, progress_partition_event("run-a", 3, 10, 100, 1.0, "w1"))
    assert s.progress_summary()["complete"] is True
    s.add(200.0, TOPIC_PROGRESS, progress_start_event("run-b", 2, 5))
    p = s.progress_summary()
    assert p["run"] == "run-b" and p["partitions_done"] == 0 and p["structures_per_second"] is None


def test_partition_without_start_uses_task_time() -> None:
    s = DashboardState()
    s.add(10.0, TOPIC_PROGRESS, progress_partition_event("r", 0, 6, 60, 2.0, "w"))
    p = s.progress_summary()
    assert p["partitions_total"] is None and p["elapsed_seconds"] == pytest.approx(2.0)
    assert p["structures_per_second"] == pytest.approx(3.0)


def test_train_summary_sorted_by_epoch_and_json_clean() -> None:
    s = DashboardState()
    s.add(1.0, TOPIC_TRAIN, train_event("t", 1, "train", 0.5, 0.02, 0.1))
    s.add(2.0, TOPIC_TRAIN, train_event("t", 0, "train", 1.0, 0.04, float("nan")))
    s.add(3.0, TOPIC_TRAIN, train_event("t", 0, "validation", 1.2))
    t = s.train_summary()
    assert t["train"] == {
        "epoch": [0, 1],
        "loss": [1.0, 0.5],
        "energy_rmse": [0.04, 0.02],
        "force_rmse": [None, 0.1],
    }
    assert t["validation"]["loss"] == [1.2] and t["validation"]["energy_rmse"] == [None]
    assert s.to_json()["progress"] is None
    assert s.to_json()["train"]["train"]["force_rmse"] == [None, 0.1]  # what the route serves
    s.add(4.0, TOPIC_TRAIN, train_event("t2", 0, "train", 3.0))
    assert s.train_summary()["run"] == "t2" and s.train_summary()["train"]["loss"] == [3.0]


def test_other_topics_and_bad_payloads_ignored() -> None:
    s = DashboardState()
    s.add(1.0, "other", {"x": 1})
    s.add(1.0, TOPIC_TRAIN, "not a dict")
    s.add(1.0, TOPIC_TRAIN, {"run": "t", "split": "test", "epoch": 0})
    assert s.n_events == 1 and s.train_summary() is None


def test_payload_validation_messages() -> None:
    with pytest.raises(ValueError, match="split must be 'train' or 'validation', got 'val'"):
        train_event("t", 0, "val", 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partition must be >= 0, got -1"):
        progress_partition_event("r", -1, 1, 1, 1.0, "w")


def test_publish_without_cluster_is_a_noop() -> None:
    assert publish_progress("r", 0, 1, 1, 0.1) is False
    assert publish_train_metrics("t", 0, "train", 1.0) is False


def test_publish_to_explicit_target() -> None:
    rec = EventRecorder()
    assert publish_progress("r", 3, 5, 50, 0.25, target=rec) is True
    assert publish_train_metrics("t", 2, "validation", 0.1, 0.01, 0.2, target=rec) is True
    assert rec.events == [
        (TOPIC_PROGRESS, progress_partition_event("r", 3, 5, 50, 0.25, "tcp://w:1")),
        (TOPIC_TRAIN, train_event("t", 2, "validation", 0.1, 0.01, 0.2)),
    ]


def test_the_page_counts_this_runs_partitions_and_says_so() -> None:
    """A resumed run computes 89 of the store's 101 partitions, one Dask task each: the
    page counts those 89 (as the terminal bar does) and names the 12 done before."""
    from dparallel.dashboard.pages import partitions_line

    s = DashboardState()
    s.add(100.0, TOPIC_PROGRESS, progress_start_event("run-b", 89, 890, 8900, 12))
    s.add(101.0, TOPIC_PROGRESS, progress_partition_event("run-b", 40, 10, 100, 1.0, "w1"))
    p = s.progress_summary()
    assert p is not None
    assert (p["partitions_done"], p["partitions_total"], p["partitions_done_before"]) == (1, 89, 12)
    line = partitions_line(p)
    assert line.startswith("<b>1</b> / 89 partitions computed by this run (one Dask task each)")
    assert line.endswith(", 12 done before and not counted")
    fresh = DashboardState()
    fresh.add(100.0, TOPIC_PROGRESS, progress_start_event("run-c", 4, 40, 400))
    summary = fresh.progress_summary()
    assert summary is not None and "before" not in partitions_line(summary)


def test_two_featurize_runs_at_once_keep_their_own_counts() -> None:
    """A partition of another run replaced the shown run by an empty one (no totals): the
    page ended at '108 / ?' and never complete. Each run now keeps its own record; the
    page shows the one started last, whole."""
    s = DashboardState()
    s.add(100.0, TOPIC_PROGRESS, progress_start_event("featurize:a.zarr", 2, 20, 200))
    s.add(101.0, TOPIC_PROGRESS, progress_start_event("featurize:b.zarr", 3, 30, 300))
    for t, run, p in [(102, "a", 0), (103, "b", 0), (104, "a", 1), (105, "b", 1), (106, "b", 2)]:
        s.add(
            t,
            TOPIC_PROGRESS,
            progress_partition_event(f"featurize:{run}.zarr", p, 10, 100, 1.0, "w"),
        )
    shown = s.progress_summary()
    assert shown is not None and shown["run"] == "featurize:b.zarr"
    assert (shown["partitions_done"], shown["partitions_total"], shown["complete"]) == (3, 3, True)


def test_the_page_names_the_other_featurizations_running_on_the_cluster(monkeypatch) -> None:
    """Two users' featurizations at once on one cluster: the page showed the one started
    last and nothing of the other, as if the cluster ran only that one. It names the others
    still running with their counts; not once one ended, nor one silent for 300 s (killed:
    it sends no end)."""
    from _event_recorder import shown_page

    def header() -> str:
        return shown_page("_ProgressPage", s, monkeypatch).header.text

    now = [0.0]  # the clock: no later than the events unless moved on below
    s = DashboardState(clock=lambda: now[0])
    s.add(100.0, TOPIC_PROGRESS, progress_start_event("featurize:/u/a.zarr", 4, 40, 400))
    s.add(
        101.0, TOPIC_PROGRESS, progress_partition_event("featurize:/u/a.zarr", 0, 10, 100, 1, "w")
    )
    s.add(102.0, TOPIC_PROGRESS, progress_start_event("featurize:/v/b.zarr", 3, 30, 300))
    s.add(
        103.0, TOPIC_PROGRESS, progress_partition_event("featurize:/v/b.zarr", 0, 10, 100, 1, "w")
    )
    shown = s.progress_summary()
    assert shown is not None and shown["run"] == "featurize:/v/b.zarr"
    a = {"run": "featurize:/u/a.zarr", "partitions_done": 1, "partitions_total": 4}
    assert shown["other_runs"] == [a]
    assert s.to_json()["progress"]["other_runs"] == [a]
    assert "Also running on this cluster (not shown): featurize:/u/a.zarr (1 / 4 partitions)" in (
        header()
    )
    s.add(104.0, TOPIC_PROGRESS, end_event("featurize:/u/a.zarr", None))
    assert s.progress_summary()["other_runs"] == []
    assert "Also running" not in header()
    s.add(105.0, TOPIC_PROGRESS, progress_start_event("featurize:/w/c.zarr", 2, 20, 200))
    assert [r["run"] for r in s.progress_summary()["other_runs"]] == ["featurize:/v/b.zarr"]
    s.add(
        403.5, TOPIC_PROGRESS, progress_partition_event("featurize:/w/c.zarr", 0, 10, 100, 1, "w")
    )
    assert s.progress_summary()["other_runs"] == []  # b: silent for over 300 s
    # a run killed when nothing else runs: no later event, the clock alone moves on
    s.add(500.0, TOPIC_PROGRESS, progress_start_event("featurize:/x/d.zarr", 2, 20, 200))
    s.add(501.0, TOPIC_PROGRESS, progress_start_event("featurize:/y/e.zarr", 2, 20, 200))
    assert [r["run"] for r in s.progress_summary()["other_runs"]][-1] == "featurize:/x/d.zarr"
    now[0] = 801.0 + 1.0
    assert s.progress_summary()["other_runs"] == []


def test_a_later_training_run_of_the_same_name_starts_its_own_curves(monkeypatch) -> None:
    """Runs of one workflow share its name: a second run's epochs 0-1 were drawn over the
    first run's 0-3, leaving its epochs 2-3 on the page."""
    from dparallel.dashboard import events

    recorder = EventRecorder()
    monkeypatch.setattr(events, "_resolve_target", lambda target: (recorder, "client"))
    s = DashboardState()
    for epochs in (4, 2):
        publish = events.epoch_publisher("quickstart")
        for e in range(epochs):
            publish({"epoch": e, "train_loss": 10.0 - e, "train_energy_rmse": 1.0})
    for t, (topic, msg) in enumerate(recorder.events):
        s.add(float(t), topic, msg)
    curves = s.train_summary()
    assert curves is not None and curves["train"]["epoch"] == [0, 1]


def test_the_training_page_shows_the_best_epoch_the_rows_carry(recorded, monkeypatch) -> None:  # noqa: ANN001
    """The loop's own best epoch, passed through its rows (not recomputed here)."""
    from _event_recorder import shown_page

    from dparallel.dashboard import epoch_publisher

    resumed = [{"epoch": 0, "train_loss": 2.0}]  # metrics.csv rows: no best epoch
    publish = epoch_publisher("m", resumed)
    assert recorded.train_summary()["best_epoch"] is None  # type: ignore[index]
    for epoch, best in ((1, 1), (2, 1)):
        publish({"epoch": epoch, "train_loss": 1.0, "validation_loss": 1.5, "best_epoch": best})
    assert recorded.train_summary()["best_epoch"] == 1  # type: ignore[index]
    assert "best epoch 1" in str(shown_page("_TrainingPage", recorded, monkeypatch).header.text)
