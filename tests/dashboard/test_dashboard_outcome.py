"""The pages say when a run ended, and that it failed and why.

Before, nothing told the pages a run had ended: a failed featurization stayed at "3 / 4
partitions … ETA 2 s" and a failed training's curves simply stopped, both looking alive.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

import ase.io
import pytest
from _event_recorder import EventRecorder, cli_train_args, shown_page

from dparallel.dashboard import DashboardState, publish_progress_end
from dparallel.dashboard.events import (
    TOPIC_PROGRESS,
    end_event,
    progress_partition_event,
    progress_start_event,
)
from dparallel.errors import TrainingError

if TYPE_CHECKING:
    from pathlib import Path


def _featurizing() -> DashboardState:
    s = DashboardState()
    s.add(0.0, TOPIC_PROGRESS, progress_start_event("r", 4, 40, 400))
    s.add(1.0, TOPIC_PROGRESS, progress_partition_event("r", 0, 10, 100, 1.0, "w"))
    return s


def _header(page_cls_name: str, s: DashboardState, monkeypatch: pytest.MonkeyPatch) -> str:
    return str(shown_page(page_cls_name, s, monkeypatch).header.text)


def test_a_failed_featurization_says_so_and_why(monkeypatch) -> None:  # noqa: ANN001
    s = _featurizing()
    summary = s.progress_summary()
    assert summary is not None and (summary["outcome"], summary["error"]) == ("running", None)
    assert "ETA 3 s" in _header("_ProgressPage", s, monkeypatch)

    s.add(2.0, TOPIC_PROGRESS, end_event("r", "1 of 4 partitions failed; partition 1: <x>"))
    summary = s.progress_summary()
    assert summary is not None and summary["outcome"] == "failed"
    header = _header("_ProgressPage", s, monkeypatch)
    assert "failed</b>: 1 of 4 partitions failed; partition 1: &lt;x&gt;" in header
    assert "ETA" not in header
    assert s.to_json()["progress"]["outcome"] == "failed"

    rec = EventRecorder()  # the re-exported helper, as docs/deploy.md shows it
    assert publish_progress_end("other-run", target=rec)
    s.add(3.0, *rec.events[0])  # another run's end: not this one's
    assert s.progress_summary()["outcome"] == "failed"  # type: ignore[index]
    s.add(4.0, TOPIC_PROGRESS, progress_start_event("r", 4, 40, 400))  # a rerun: running
    assert s.progress_summary()["outcome"] == "running"  # type: ignore[index]


def test_the_epoch_publisher_says_how_training_ended(recorded, monkeypatch) -> None:  # noqa: ANN001
    import dparallel.dashboard.events as events

    s = recorded
    row = {"epoch": 0, "train_loss": 1.0, "validation_loss": 1.5}

    ok = events.epoch_publisher("m")
    with ok.ending():
        ok(row)
    assert (s.train_summary()["outcome"], s.train_summary()["error"]) == ("finished", None)  # type: ignore[index]
    assert "<b>finished</b>" in _header("_TrainingPage", s, monkeypatch)

    bad = events.epoch_publisher("m")
    with pytest.raises(TrainingError), bad.ending():
        bad(row)
        raise TrainingError("epoch 1: the store changed under the run")
    summary = s.train_summary()
    assert summary is not None and summary["outcome"] == "failed"
    assert summary["error"] == "TrainingError: epoch 1: the store changed under the run"
    assert "failed</b>: TrainingError: epoch 1" in _header("_TrainingPage", s, monkeypatch)

    stopped = events.epoch_publisher("m")
    with pytest.raises(KeyboardInterrupt), stopped.ending():
        stopped(row)
        raise KeyboardInterrupt
    assert s.train_summary()["error"] == "interrupted"  # type: ignore[index]

    lost = SimpleNamespace(status="closed", log_event=lambda topic, msg: None)
    monkeypatch.setattr(events, "_resolve_target", lambda target: (lost, "client"))
    assert events.epoch_publisher("m").finish() is False  # no end event: no reconnect wait


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_a_featurization_with_a_failing_partition_ends_failed_on_the_page(tmp_path: Path) -> None:
    from dparallel.cluster import ClusterSpec, connect
    from dparallel.dashboard.plugin import state_of
    from dparallel.datasets import generate_emt_cu
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.errors import PartitionFailedError
    from dparallel.workflow.featurize import FeaturizeOptions, featurize

    frames = generate_emt_cu(8, seed=5)
    frames[5].numbers[2] = 8  # oxygen: not in the descriptors, and on_error is raise
    path = tmp_path / "cu.extxyz"
    ase.io.write(path, frames, format="extxyz")
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, cutoff="cos", radial=[(0.5, 0.0)], narrow=[])
    with connect(ClusterSpec(n_workers=1, dashboard_address="127.0.0.1:0")) as handle:
        options = FeaturizeOptions(partition_atoms=60, client=handle.client, retries=0)
        with pytest.raises(PartitionFailedError):
            featurize(path, tmp_path / "s.zarr", DescriptorSet(acsf=acsf), options)
        summary = state_of(handle.cluster.scheduler).progress_summary()
    assert summary is not None and summary["outcome"] == "failed"
    assert summary["error"].startswith(f"1 of {summary['partitions_total']} partitions failed")
    assert "InvalidStructureError" in summary["error"] and "structure 5" in summary["error"]


def _failing_train(*args: object, callback: list, **kwargs: object) -> None:
    for cb in callback:
        cb({"epoch": 0, "train_loss": 1.0})
    raise TrainingError("epoch 1: the loss is not finite")


def _refused(*args: object, callback: list, **kwargs: object) -> None:
    raise TrainingError("store.zarr is incomplete: 3 of 4 partitions")  # no epoch trained


@pytest.fixture(
    params=[(_failing_train, "loss is not finite", [0]), (_refused, "is incomplete", [])],
    ids=["after-epoch-0", "before-epoch-0"],
)
def failing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list]:
    """``dparallel.train.train`` failing after its first epoch, or refusing before any (the
    run is shown from its start, with no epoch yet): the error and the epochs shown."""
    import dparallel.train

    train, error, epochs = request.param
    monkeypatch.setattr(dparallel.train, "train", train)
    return error, epochs


def test_dparallel_train_says_its_training_failed(recorded, tmp_path, monkeypatch, failing) -> None:  # noqa: ANN001
    from dparallel.cli import train as cli_train

    error, epochs = failing
    monkeypatch.setattr(cli_train, "_store_and_descriptors", lambda store, path: (store, None))
    with pytest.raises(TrainingError):
        cli_train.run(cli_train_args(tmp_path, resume=False))
    summary = recorded.train_summary()
    assert summary is not None and summary["train"]["epoch"] == epochs
    assert summary["outcome"] == "failed" and error in summary["error"]


def test_dparallel_run_says_its_training_failed(recorded, tmp_path, monkeypatch, failing) -> None:  # noqa: ANN001
    import dparallel.store
    from dparallel.workflow import run

    error, epochs = failing
    monkeypatch.setattr(dparallel.store, "open_store", lambda path: path)
    spec = SimpleNamespace(name="quickstart", training=object())
    with pytest.raises(TrainingError):
        run._train(spec, "store.zarr", tmp_path, None, False, print)  # type: ignore[arg-type]
    summary = recorded.train_summary()
    assert summary is not None and summary["run"] == "quickstart"
    assert summary["train"]["epoch"] == epochs
    assert summary["outcome"] == "failed" and error in summary["error"]
