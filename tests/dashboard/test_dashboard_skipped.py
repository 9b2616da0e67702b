"""Skipped structures (``on_error="skip"``) on the progress page and in its ETA.

Before, partitions reported only the structures they featurized while the run's total
counted every structure: a finished run with 15 of 60 skipped read "45 / 60 structures",
ETA 1.3 s, and said nothing of the skipped ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ase.io
import pytest

from dparallel.dashboard import DashboardState
from dparallel.dashboard.events import (
    TOPIC_PROGRESS,
    progress_partition_event,
    progress_start_event,
)

if TYPE_CHECKING:
    from pathlib import Path

# (featurized, skipped) per partition of a run of 60 structures, each task 1 s, one a second
PARTS = [(15, 0), (10, 5), (12, 3), (8, 7)]


def _state(n_done: int) -> DashboardState:
    s = DashboardState()
    s.add(0.0, TOPIC_PROGRESS, progress_start_event("r", len(PARTS), 60, 600))
    for p, (n, skipped) in enumerate(PARTS[:n_done]):
        event = progress_partition_event("r", p, n, 10 * n, 1.0, "w", n_skipped=skipped)
        s.add(p + 1.0, TOPIC_PROGRESS, event)
    return s


def test_the_summary_counts_skipped_structures_and_the_eta_leaves_them_out() -> None:
    half = _state(2).progress_summary()
    assert half is not None
    assert (half["structures_done"], half["structures_skipped"]) == (25, 5)
    # 30 of 60 gone through in 2 s: 30 left take 2 s more
    assert half["eta_seconds"] == pytest.approx(2.0)
    done = _state(4).progress_summary()
    assert done is not None and done["complete"]
    assert (done["structures_done"], done["structures_skipped"]) == (45, 15)
    assert done["eta_seconds"] == 0.0
    assert done["structures_per_second"] == pytest.approx(45 / 4)  # featurized ones


def test_the_progress_page_says_how_many_were_skipped(monkeypatch) -> None:  # noqa: ANN001
    pytest.importorskip("bokeh")
    import dparallel.dashboard.pages as pages

    s = _state(4)
    monkeypatch.setattr(pages, "state_of", lambda scheduler: s)
    page = pages._ProgressPage(None)
    page.update()
    assert "<b>45</b> / 60 structures (<b>15</b> skipped)" in page.header.text
    assert "ETA 0 s" in page.header.text


def test_the_terminal_bar_eta_leaves_skipped_structures_out() -> None:
    from dparallel.cli._progress import FeaturizeProgress

    now = [0.0]
    bar = FeaturizeProgress(quiet=True, clock=lambda: now[0])
    bar(progress_start_event("r", 2, 20, 200), 0, 2)
    now[0] = 1.0
    bar({"n_structures": 5, "n_atoms": 50, "seconds": 1.0, "n_skipped": 5}, 1, 2)
    assert bar.throughput().eta_seconds == pytest.approx(1.0)  # 10 of 20 in 1 s
    now[0] = 2.0
    bar({"n_structures": 10, "n_atoms": 100, "seconds": 1.0, "n_skipped": 0}, 2, 2)
    assert bar.throughput().eta_seconds == 0.0


def test_each_task_reports_its_skipped_structures_which_the_driver_publishes(
    tmp_path: Path,
    monkeypatch,  # noqa: ANN001
) -> None:
    import dparallel.dashboard.events as events
    from dparallel.datasets import generate_emt_cu
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    frames = generate_emt_cu(12, seed=5)
    for k in (1, 4, 9):
        frames[k].numbers[2] = 8  # oxygen: the descriptors define Cu only
    path = tmp_path / "cu.extxyz"
    ase.io.write(path, frames, format="extxyz")
    sent: list[dict] = []

    def publish(run: str, partition: int, n: int, n_atoms: int, seconds: float, **kw) -> bool:  # noqa: ANN003
        sent.append({"n_structures": n, **kw})
        return True

    monkeypatch.setattr(events, "publish_progress", publish)
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, cutoff="cos", radial=[(0.5, 0.0)], narrow=[])
    store = featurize_in_process(
        path,
        tmp_path / "s.zarr",
        DescriptorSet(acsf=acsf, derivatives=False),
        FeaturizeOptions(partition_atoms=120, on_error="skip"),
    )
    # the driver publishes each task's report as it arrives (featurize._publish_report)
    from dparallel.workflow.featurize import _publish_report

    for p in range(store.n_partitions):
        _publish_report("featurize:s.zarr", p, store.report(p), client=None)
    assert len(sent) == store.n_partitions > 1
    assert sum(e["n_skipped"] for e in sent) == 3 == len(store.skipped())
    assert sum(e["n_structures"] for e in sent) == 9 == store.n_structures


def test_the_driver_publishes_no_report_through_a_client_that_lost_its_scheduler() -> None:
    from types import SimpleNamespace

    from dparallel.workflow.featurize import _publish_report

    sent: list[tuple] = []
    report = {"n_structures": 2, "n_atoms": 8, "seconds": 0.1, "n_skipped": 0, "worker": "w"}
    for status in ("running", "connecting", "closed"):
        client = SimpleNamespace(status=status, log_event=lambda *a, s=status: sent.append((s, *a)))
        _publish_report("featurize:s.zarr", 0, report, client)
    assert [s[0] for s in sent] == ["running"]
