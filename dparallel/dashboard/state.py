"""Pure aggregation of dashboard events into progress and training summaries.

No networking: :class:`DashboardState` is fed ``(time, topic, payload)`` and answers the
questions the pages and the JSON route ask, so it is unit-tested without a cluster.
:func:`throughput` is the one definition of the featurization rate that the terminal bar
(``dparallel featurize``) and the dashboard page share, each feeding it from its own clock.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from dparallel._files import strict_json
from dparallel.dashboard.events import TOPIC_PROGRESS, TOPIC_TRAIN

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = ["METRICS", "SPLITS", "DashboardState", "Finished", "Throughput", "throughput"]

METRICS = ("loss", "energy_rmse", "force_rmse")
SPLITS = ("train", "validation")


class Finished(NamedTuple):
    """One finished partition: when (s, any clock), its task's seconds and its size
    (``n_skipped``: its structures skipped, not among ``n_structures``)."""

    time: float
    seconds: float
    n_structures: int
    n_atoms: int
    n_skipped: int = 0


@dataclass(frozen=True)
class Throughput:
    """Rates over the run so far (``None`` before any partition finished)."""

    elapsed_seconds: float  # s, start → last finished partition (≥ the longest task)
    structures_done: int
    atoms_done: int
    structures_per_second: float | None
    atoms_per_second: float | None
    eta_seconds: float | None  # s, remaining structures at the current rate
    structures_skipped: int = 0  # skipped (on_error="skip"): not done, not remaining


def throughput(
    started: float | None, finished: Iterable[Finished], structures_total: int | None = None
) -> Throughput:
    """Structures and atoms done over the time from ``started`` to the last finished one.

    Without ``started`` the run is taken to start when its first partition began
    (``time - seconds``). The elapsed time is at least the longest task: a partition
    cannot finish faster than its own task (this guards bursts of late reports). Skipped
    structures are of the total but not done: the ETA is of those neither done nor skipped,
    at the rate structures are gone through.
    """
    parts = list(finished)
    structures = sum(p.n_structures for p in parts)
    atoms = sum(p.n_atoms for p in parts)
    skipped = sum(p.n_skipped for p in parts)
    if not parts:
        return Throughput(0.0, 0, 0, None, None, None)
    t0 = started if started is not None else min(p.time - p.seconds for p in parts)
    elapsed = max(max(p.time for p in parts) - t0, max(p.seconds for p in parts))
    if elapsed <= 0:
        return Throughput(0.0, structures, atoms, None, None, None, skipped)
    rate = structures / elapsed
    eta = None
    if structures + skipped > 0 and structures_total is not None:
        eta = max(structures_total - structures - skipped, 0) * elapsed / (structures + skipped)
    return Throughput(elapsed, structures, atoms, rate, atoms / elapsed, eta, skipped)


@dataclass
class _Partition:
    time: float
    n_structures: int
    n_atoms: int
    seconds: float
    worker: str
    n_skipped: int = 0


@dataclass
class _Run:
    run: str
    started: float | None = None
    n_partitions: int | None = None
    n_structures: int | None = None
    n_atoms: int | None = None
    n_done_before: int = 0  # the store's partitions done by earlier runs (not counted)
    partitions: dict[int, _Partition] = field(default_factory=dict)
    ended: dict[str, Any] | None = None  # its end: {"error": str | None}
    last: float = 0.0  # time of its latest event


@dataclass
class _Curves:
    run: str
    run_id: str = ""
    ended: dict[str, Any] | None = None  # its end: {"error": str | None}
    best_epoch: int | None = None  # the training loop's best so far, as its rows said
    # split -> epoch -> metric -> value
    points: dict[str, dict[int, dict[str, float | None]]] = field(
        default_factory=lambda: {s: {} for s in SPLITS}
    )


#: Runs remembered per kind (the page shows the latest started; older ones are dropped).
_KEPT_RUNS = 16
#: Seconds without an event (before now) after which a featurization that never said it
#: ended no longer counts as running beside the shown one (killed).
_SILENT_S = 300.0


class DashboardState:
    """Latest featurization run's progress and latest training run's curves.

    Every run's events go to that run's own record (featurization by its name, which
    names its store; training by its name and id), so runs at the same time or one after
    another on one cluster never mix: the page shows the one started last.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        #: Now, in the events' seconds since the epoch (a run silent since counts as gone).
        self.clock = clock
        self.progress: _Run | None = None
        self.train: _Curves | None = None
        self._runs: dict[str, _Run] = {}
        self._latest = 0.0  # time of the latest featurization event
        self._curves: dict[tuple[str, str], _Curves] = {}
        self.n_events = 0

    def add(self, t: float, topic: str, msg: Any) -> None:
        """Record one event published at time ``t`` (seconds since the epoch)."""
        if not isinstance(msg, dict):
            return
        if topic == TOPIC_PROGRESS:
            self._add_progress(t, msg)
        elif topic == TOPIC_TRAIN:
            self._add_train(t, msg)
        else:
            return
        self.n_events += 1

    def _add_progress(self, t: float, msg: dict) -> None:
        run = str(msg.get("run", ""))
        kind = msg.get("kind")
        self._latest = max(self._latest, t)
        if kind == "start":
            self.progress = _remember(
                self._runs,
                run,
                _Run(
                    run=run,
                    started=t,
                    n_partitions=int(msg.get("n_partitions", 0)),
                    n_structures=int(msg.get("n_structures", 0)),
                    n_atoms=int(msg.get("n_atoms", 0)),
                    n_done_before=int(msg.get("n_done_before", 0)),
                    last=t,
                ),
            )
        elif kind == "partition":
            record = self._runs.get(run)
            if record is None:  # its start came before this page did
                record = _remember(self._runs, run, _Run(run=run))
                self.progress = self.progress or record
            record.last = max(record.last, t)
            record.partitions[int(msg["partition"])] = _Partition(
                time=t,
                n_structures=int(msg.get("n_structures", 0)),
                n_atoms=int(msg.get("n_atoms", 0)),
                seconds=float(msg.get("seconds", 0.0)),
                worker=str(msg.get("worker", "")),
                n_skipped=int(msg.get("n_skipped", 0)),
            )
        elif kind == "end" and run in self._runs:
            self._runs[run].ended = _ending(msg)

    def _add_train(self, t: float, msg: dict) -> None:
        run = str(msg.get("run", ""))
        split = msg.get("split")
        key = (run, str(msg.get("run_id", "")))
        kind = msg.get("kind")
        if kind == "start":  # a new run, shown from now on (no epochs yet)
            self.train = _remember(self._curves, key, _Curves(run=run, run_id=key[1]))
        if kind == "end" and key in self._curves:
            self._curves[key].ended = _ending(msg)
        if split not in SPLITS:
            return
        curves = self._curves.get(key)
        if curves is None:  # its start came before this page did: shown from now on
            curves = self.train = _remember(self._curves, key, _Curves(run=run, run_id=key[1]))
        if msg.get("best_epoch") is not None:
            curves.best_epoch = int(msg["best_epoch"])
        curves.points[split][int(msg.get("epoch", 0))] = {
            m: (None if msg.get(m) is None else float(msg[m]))
            for m in (*METRICS, "data_wait_fraction")
        }

    def progress_summary(self) -> dict[str, Any] | None:
        """Partitions done/total, structures/s, ETA and per-worker throughput (or ``None``):
        counts of this run's partitions, as the terminal bar counts them (not those of
        ``partitions_done_before``); rates and ETA by :func:`throughput` of the events'
        times; per worker, structures over its summed task seconds; ``outcome`` and
        ``error`` once the run ended (:func:`_outcome`)."""
        run = self.progress
        if run is None:
            return None
        parts = run.partitions.values()
        rate = throughput(
            run.started,
            (Finished(p.time, p.seconds, p.n_structures, p.n_atoms, p.n_skipped) for p in parts),
            run.n_structures,
        )
        workers: dict[str, dict[str, Any]] = {}
        for p in parts:
            w = workers.setdefault(p.worker, {"partitions": 0, "structures": 0, "seconds": 0.0})
            w["partitions"] += 1
            w["structures"] += p.n_structures
            w["seconds"] += p.seconds
        for w in workers.values():
            w["structures_per_second"] = (
                w["structures"] / w["seconds"] if w["seconds"] > 0 else None
            )
        n_total = run.n_partitions
        return {
            "run": run.run,
            "partitions_done": len(run.partitions),
            "partitions_total": n_total,
            "partitions_done_before": run.n_done_before,
            "structures_done": rate.structures_done,
            "structures_total": run.n_structures,
            "structures_skipped": rate.structures_skipped,
            "atoms_done": rate.atoms_done,
            "atoms_total": run.n_atoms,
            "elapsed_seconds": rate.elapsed_seconds,
            "structures_per_second": rate.structures_per_second,
            "atoms_per_second": rate.atoms_per_second,
            "eta_seconds": rate.eta_seconds,
            "complete": bool(n_total is not None and len(run.partitions) >= n_total),
            **_outcome(run.ended),
            "workers": dict(sorted(workers.items())),
            "other_runs": self._others_running(run),
        }

    def _others_running(self, shown: _Run) -> list[dict[str, Any]]:
        """The featurizations besides ``shown`` still running (on a shared cluster): not
        ended, and heard from within :data:`_SILENT_S` of now (a killed run sends no end,
        and nothing else may come after it); their counts."""
        now = max(self._latest, self.clock())
        return [
            {"run": r.run, "partitions_done": len(r.partitions), "partitions_total": r.n_partitions}
            for r in self._runs.values()
            if r is not shown and r.ended is None and now - r.last <= _SILENT_S
        ]

    def train_summary(self) -> dict[str, Any] | None:
        """Per split, columns ``epoch`` and each metric sorted by epoch (or ``None``), and
        ``data_wait_fraction``: per training epoch, the share of it spent waiting for data;
        ``best_epoch``: the loop's best epoch so far (``None`` before one said it);
        ``outcome`` and ``error`` once the run ended (:func:`_outcome`)."""
        curves = self.train
        if curves is None:
            return None
        out: dict[str, Any] = {
            "run": curves.run,
            "best_epoch": curves.best_epoch,
            **_outcome(curves.ended),
        }
        for split in SPLITS:
            epochs = sorted(curves.points[split])
            cols: dict[str, list] = {"epoch": epochs}
            for m in METRICS:
                cols[m] = [curves.points[split][e][m] for e in epochs]
            out[split] = cols
        train = curves.points["train"]
        # share of each training epoch spent waiting for data, by the train columns' epochs
        out["data_wait_fraction"] = [train[e]["data_wait_fraction"] for e in sorted(train)]
        return out

    def to_json(self) -> dict[str, Any]:
        """Everything the JSON route serves, as it serves it (JSON has no NaN: a non-finite
        number, one not measured, is ``None``)."""
        summaries = {"progress": self.progress_summary(), "train": self.train_summary()}
        return json.loads(strict_json(summaries, missing=True))


def _ending(msg: dict) -> dict[str, Any]:
    error = msg.get("error")
    return {"error": None if error is None else str(error)}


def _outcome(ended: dict[str, Any] | None) -> dict[str, Any]:
    """``outcome``: ``"running"`` (no end reported), ``"finished"`` or ``"failed"``, and
    ``error``: what stopped a failed run."""
    if ended is None:
        return {"outcome": "running", "error": None}
    error = ended["error"]
    return {"outcome": "finished" if error is None else "failed", "error": error}


def _remember(records: dict, key: Any, record: Any) -> Any:
    """``records[key] = record`` (the newest last), dropping the oldest beyond
    :data:`_KEPT_RUNS`; returns ``record``."""
    records.pop(key, None)
    records[key] = record
    while len(records) > _KEPT_RUNS:
        records.pop(next(iter(records)))
    return record
