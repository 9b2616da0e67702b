"""Bokeh documents for the dparallel pages of the Dask dashboard.

Each entry of :data:`PAGES` is an application for ``distributed.dashboard.scheduler.
applications`` that refreshes from the scheduler's
:class:`~dparallel.dashboard.state.DashboardState` in a periodic callback.
"""

from __future__ import annotations

import html
from functools import partial
from typing import Any

from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource, Div, FactorRange, Legend, Range1d
from bokeh.plotting import figure

from dparallel.dashboard.plugin import state_of
from dparallel.dashboard.routes import PAGE_ROUTES
from dparallel.dashboard.state import METRICS, SPLITS, DashboardState

__all__ = ["PAGES"]

#: Update interval of the pages in milliseconds.
INTERVAL_MS = 500

PROGRESS_TITLE = "dparallel: featurization progress"
TRAINING_TITLE = "dparallel: training curves"

_METRIC_LABELS = {
    "loss": "loss",
    "energy_rmse": "energy RMSE (meV/atom)",
    "force_rmse": "force RMSE (meV/Å)",
}
#: Events carry eV/atom and eV/Å; the page shows meV, as the terminal does.
_TO_SHOWN = {"energy_rmse": 1e3, "force_rmse": 1e3}
_SPLIT_COLORS = {"train": "#1f77b4", "validation": "#ff7f0e"}


def _fmt(value: float | None, spec: str = ".1f", unit: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{unit}"


def _same(a: list, b: list) -> bool:
    """Equal columns, NaN equal to NaN (a missing metric)."""
    return len(a) == len(b) and all(
        x == y or (x != x and y != y) for x, y in zip(a, b, strict=True)
    )


def refresh(source: ColumnDataSource, data: dict[str, list]) -> None:
    """Give ``source`` the columns ``data``, sending the browser only what changed: nothing
    when they are the same, the new rows when they extend the shown ones, else all.
    (Each tick used to send every column again: a long run's whole curves, twice a second,
    to every open page, even after the run had ended.)"""
    old = source.data
    n = len(next(iter(old.values()), []))
    if old.keys() != data.keys() or not all(_same(list(old[k]), data[k][:n]) for k in data):
        source.data = data
    elif any(len(v) > n for v in data.values()):
        source.stream({k: v[n:] for k, v in data.items()})


class _Page:
    """A page that refreshes from the scheduler's state, only when it took new events."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self._seen: tuple[Any, int] | None = None

    def update(self) -> None:
        state = state_of(self.scheduler)
        seen = (state, state.n_events)  # a state rebuilt from the log is a new object
        if seen != self._seen:
            self._seen = seen
            self.show(state)

    def show(self, state: DashboardState) -> None:
        raise NotImplementedError


class _ProgressPage(_Page):
    """Header, a done/total bar and per-worker throughput bars."""

    def __init__(self, scheduler: Any) -> None:
        super().__init__(scheduler)
        self.header = Div(text="", sizing_mode="stretch_width")
        self.bar_source = ColumnDataSource({"y": ["partitions"], "done": [0.0], "total": [1.0]})
        self.bar = figure(
            title="Partitions done",
            y_range=FactorRange(factors=["partitions"]),
            x_range=Range1d(0, 1),
            height=120,
            sizing_mode="stretch_width",
            toolbar_location=None,
        )
        self.bar.hbar(y="y", right="total", height=0.6, color="#dddddd", source=self.bar_source)
        self.bar.hbar(y="y", right="done", height=0.6, color="#2ca02c", source=self.bar_source)
        self.worker_source = ColumnDataSource({"worker": [], "rate": [], "structures": []})
        self.workers = figure(
            title="Per-worker throughput (structures/s of task time)",
            x_range=FactorRange(factors=[]),
            height=320,
            sizing_mode="stretch_width",
            toolbar_location=None,
            tooltips=[("worker", "@worker"), ("structures/s", "@rate"), ("done", "@structures")],
        )
        self.workers.vbar(x="worker", top="rate", width=0.7, source=self.worker_source)
        self.workers.xaxis.major_label_orientation = 0.4
        self.root = column(self.header, self.bar, self.workers, sizing_mode="stretch_width")

    def show(self, state: DashboardState) -> None:
        summary = state.progress_summary()
        if summary is None:
            self.header.text = "<h2>Featurization</h2><p>No featurization run reported yet.</p>"
            return
        done, total = summary["partitions_done"], summary["partitions_total"]
        self.header.text = (
            f"<h2>Featurization: {html.escape(summary['run'])}</h2>"
            f"<p>{partitions_line(summary)} &nbsp;·&nbsp; "
            f"<b>{summary['structures_done']}</b> / "
            f"{summary['structures_total'] if summary['structures_total'] is not None else '?'}"
            f" structures{_skipped(summary['structures_skipped'])} &nbsp;·&nbsp; "
            f"<b>{_fmt(summary['structures_per_second'])}</b> structures/s, "
            f"<b>{_fmt(summary['atoms_per_second'])}</b> atoms/s &nbsp;·&nbsp; "
            f"{_ending(summary)}</p>{_others(summary['other_runs'])}"
        )
        n_total = float(total if total else max(done, 1))
        self.bar.x_range.end = n_total
        refresh(self.bar_source, {"y": ["partitions"], "done": [float(done)], "total": [n_total]})
        names = list(summary["workers"])
        self.workers.x_range.factors = names
        refresh(
            self.worker_source,
            {
                "worker": names,
                "rate": [summary["workers"][w]["structures_per_second"] or 0.0 for w in names],
                "structures": [summary["workers"][w]["structures"] for w in names],
            },
        )


def _ending(summary: dict[str, Any]) -> str:
    """The progress header's last words: the ETA (and complete), or that the run failed."""
    if summary["outcome"] == "failed":  # no ETA: nothing is computed any more
        return _failed(summary["error"])
    eta = f"ETA {_fmt(summary['eta_seconds'], '.0f', ' s')}"
    return eta + (" &nbsp;·&nbsp; <b>complete</b>" if summary["complete"] else "")


def _others(runs: list[dict[str, Any]]) -> str:
    """The header's line naming the other featurizations running on the cluster (or '')."""
    if not runs:
        return ""
    each = ", ".join(
        f"{html.escape(r['run'])} ({r['partitions_done']} / "
        f"{r['partitions_total'] if r['partitions_total'] is not None else '?'} partitions)"
        for r in runs
    )
    return f"<p>Also running on this cluster (not shown): {each}</p>"


def _failed(error: str) -> str:
    return f"<b style='color:#d62728'>failed</b>: {html.escape(error)}"


def _skipped(n: int) -> str:
    """The header's words for the skipped structures (none: nothing)."""
    return f" (<b>{n}</b> skipped)" if n else ""


def partitions_line(summary: dict[str, Any]) -> str:
    """What the page counts, in words: this run's partitions (one Dask task each, as the
    terminal bar counts them), and how many earlier runs had already done."""
    done, total = summary["partitions_done"], summary["partitions_total"]
    before = summary.get("partitions_done_before", 0)
    text = (
        f"<b>{done}</b> / {total if total is not None else '?'} partitions computed by this "
        "run (one Dask task each)"
    )
    return text + (f", {before} done before and not counted" if before else "")


def shown_columns(cols: dict[str, list]) -> dict[str, list]:
    """A split's columns as the page shows them: RMSEs in meV/atom and meV/Å."""
    return {
        k: [v if v is None or k not in _TO_SHOWN else v * _TO_SHOWN[k] for v in vals]
        for k, vals in cols.items()
    }


def training_header(split: str, cols: dict[str, list]) -> str:
    """The header's words for one split's latest epoch (``cols`` from :func:`shown_columns`),
    with units and two decimals, as the terminal prints them."""
    return (
        f"{split}: epoch {cols['epoch'][-1]}, loss {_fmt(cols['loss'][-1], '.4g')}, "
        f"E RMSE {_fmt(cols['energy_rmse'][-1], '.2f', ' meV/atom')}, "
        f"F RMSE {_fmt(cols['force_rmse'][-1], '.2f', ' meV/Å')}"
    )


class _TrainingPage(_Page):
    """Loss, energy RMSE and force RMSE per epoch, train and validation."""

    def __init__(self, scheduler: Any) -> None:
        super().__init__(scheduler)
        self.header = Div(text="", sizing_mode="stretch_width")
        self.sources = {
            s: ColumnDataSource({"epoch": [], **{m: [] for m in METRICS}}) for s in SPLITS
        }
        figs = []
        for metric in METRICS:
            fig = figure(
                title=_METRIC_LABELS[metric],
                height=300,
                sizing_mode="stretch_width",
                x_axis_label="epoch",
                toolbar_location="above",
                tools="pan,wheel_zoom,box_zoom,reset",
            )
            items = []
            for split in SPLITS:
                how = {"source": self.sources[split], "color": _SPLIT_COLORS[split]}
                line = fig.line("epoch", metric, line_width=2, **how)
                items.append((split, [line, fig.scatter("epoch", metric, size=5, **how)]))
            fig.add_layout(Legend(items=items, location="top_right"))
            figs.append(fig)
        self.root = column(
            self.header, row(*figs, sizing_mode="stretch_width"), sizing_mode="stretch_width"
        )

    def show(self, state: DashboardState) -> None:
        summary = state.train_summary()
        if summary is None:
            self.header.text = "<h2>Training</h2><p>No training run reported yet.</p>"
            return
        parts = []
        for split in SPLITS:
            cols = shown_columns(summary[split])
            refresh(
                self.sources[split],
                {k: [float("nan") if v is None else v for v in vals] for k, vals in cols.items()},
            )
            if cols["epoch"]:
                parts.append(training_header(split, cols))
        if not parts:  # started: settings and data being read, or refused before epoch 0
            parts.append("no epoch yet")
        if summary.get("best_epoch") is not None:
            parts.append(f"best epoch {summary['best_epoch']}")
        waits = [w for w in summary.get("data_wait_fraction", []) if w is not None]
        if waits:
            parts.append(f"waiting for data {100 * waits[-1]:.1f}% of the last epoch")
        if summary["outcome"] == "failed":
            parts.append(_failed(summary["error"]))
        elif summary["outcome"] == "finished":
            parts.append("<b>finished</b>")
        self.header.text = (
            f"<h2>Training: {html.escape(summary['run'])}</h2><p>"
            + " &nbsp;·&nbsp; ".join(parts)
            + "</p>"
        )


def _make_doc(page_cls: type, title: str, scheduler: Any, extra: dict, doc: Any) -> None:
    """Fill ``doc`` with a page that refreshes itself (distributed's application signature
    once ``page_cls`` and ``title`` are bound)."""
    page = page_cls(scheduler)
    page.update()
    doc.title = title
    doc.add_root(page.root)
    doc.add_periodic_callback(page.update, INTERVAL_MS)


#: The pages added to the Dask dashboard, by route: the featurization progress and the
#: training curves.
PAGES = {
    f"/{PAGE_ROUTES[0]}": partial(_make_doc, _ProgressPage, PROGRESS_TITLE),
    f"/{PAGE_ROUTES[1]}": partial(_make_doc, _TrainingPage, TRAINING_TITLE),
}
