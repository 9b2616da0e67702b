"""Terminal progress: the featurize rate is the dashboard's number, computed the same way."""

from __future__ import annotations

import io
import json
import time

import pytest
from daskprocs import http_get

from dparallel.cli._progress import EpochProgress, FeaturizeProgress, clock_text
from dparallel.dashboard import STATUS_ROUTE, DashboardState
from dparallel.dashboard.events import (
    TOPIC_PROGRESS,
    progress_partition_event,
    progress_start_event,
)

# (time, partition, structures, atoms, task seconds): one run as both sides see it.
EVENTS = [(102.0, 0, 10, 100, 2.0), (103.0, 1, 12, 120, 3.0), (105.0, 2, 8, 80, 1.0)]


class _Clock:
    def __init__(self, times: list[float]) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0)


def test_terminal_and_dashboard_rates_agree_and_match_hand_values() -> None:
    start = progress_start_event("run", 4, 40, 400)
    state = DashboardState()
    state.add(100.0, TOPIC_PROGRESS, start)
    out = io.StringIO()
    bar = FeaturizeProgress(
        stream=out, force=True, clock=_Clock([100.0] + [e[0] for e in EVENTS]), min_interval=0
    )
    bar(start, 0, 4)
    for done, (t, p, s, a, sec) in enumerate(EVENTS, start=1):
        report = progress_partition_event("run", p, s, a, sec, "w")
        state.add(t, TOPIC_PROGRESS, report)
        bar(report, done, 4)
        mine, theirs = bar.throughput(), state.progress_summary()
        assert mine.structures_per_second == theirs["structures_per_second"]
        assert mine.atoms_per_second == theirs["atoms_per_second"]
        assert mine.eta_seconds == theirs["eta_seconds"]
    # by hand: 30 structures, 300 atoms in 105 − 100 = 5 s; 10 structures left at 6/s
    assert mine.structures_per_second == pytest.approx(6.0)
    assert mine.atoms_per_second == pytest.approx(60.0)
    assert mine.eta_seconds == pytest.approx(10 / 6)
    text = out.getvalue()
    assert "3/4 partitions, 60 atoms/s, 6.0 structures/s, ETA 00:02" in text
    assert "300/400 atoms" in text


def test_quiet_and_not_a_terminal_draw_nothing() -> None:
    for kwargs in ({"quiet": True, "force": True}, {}):
        out = io.StringIO()  # not a TTY
        bar = FeaturizeProgress(stream=out, **kwargs)
        bar(progress_start_event("r", 1, 2, 20), 0, 1)
        bar(progress_partition_event("r", 0, 2, 20, 0.1, "w"), 1, 1)
        epochs = EpochProgress(3, stream=out, **kwargs)
        epochs.update({"epoch": 0, "seconds": 1.0})
        epochs.close()
        assert out.getvalue() == ""
        assert bar.throughput().structures_per_second is not None


def test_epoch_progress_shows_epoch_time_rate_and_eta() -> None:
    out = io.StringIO()
    bar = EpochProgress(10, stream=out, force=True, min_interval=0)
    bar.update(
        {"epoch": 0, "seconds": 2.0, "train_structures": 50, "validation_energy_rmse": 0.0123}
    )
    bar.update({"epoch": 1, "seconds": 4.0, "train_structures": 50})
    bar.close()
    text = out.getvalue()
    # epoch 2 took 4 s for 50 structures; mean 3 s × 8 epochs left = 24 s
    assert "2/10 epochs" in text and "epoch 4.00 s, 12.5 structures/s, ETA 00:24" in text
    assert "val E 12.30 meV/atom" in text
    assert clock_text(3725) == "1:02:05" and clock_text(None) == "--:--"


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_real_featurize_run_terminal_matches_dashboard(tmp_path) -> None:
    """A featurize run on a 2-worker cluster: the bar's rate and the status.json rate."""
    from dparallel.cluster import ClusterSpec, connect
    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize

    data = write_emt_cu(tmp_path / "cu.xyz", 24, seed=1)
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.5, 0.0)], narrow=[(0.01, 1.0, -1.0, 0.0)])
    bar = FeaturizeProgress(stream=io.StringIO(), force=True)
    with connect(ClusterSpec(n_workers=2, dashboard_address="127.0.0.1:0")) as handle:
        featurize(
            data,
            tmp_path / "f.zarr",
            DescriptorSet(acsf=acsf),
            FeaturizeOptions(partition_atoms=150, client=handle.client, progress=bar),
        )
        base = handle.dashboard_link.rsplit("/", 1)[0]
        deadline = time.monotonic() + 30
        while True:
            status, body = http_get(f"{base}/{STATUS_ROUTE}")
            assert status == 200
            board = json.loads(body)["progress"]
            if (board and board["complete"]) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    mine = bar.throughput()
    assert board["complete"] and board["structures_done"] == mine.structures_done == 24
    assert board["atoms_done"] == mine.atoms_done
    # Same formula, two clocks (scheduler event times vs. this process's receive times):
    # they differ only by message latency, small against the run's seconds.
    assert mine.structures_per_second == pytest.approx(board["structures_per_second"], rel=0.2)
    assert mine.atoms_per_second == pytest.approx(board["atoms_per_second"], rel=0.2)
