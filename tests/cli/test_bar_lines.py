"""Progress bars: no stray ``[, ``, lines that fit the terminal; the dashboard in meV too."""

from __future__ import annotations

import fcntl
import io
import os
import re
import select
import struct
import termios

import pytest

from dparallel.cli._progress import EpochProgress, FeaturizeProgress, milli
from dparallel.dashboard.pages import _METRIC_LABELS, shown_columns, training_header

ROW = {
    "epoch": 0,
    "seconds": 1.5,
    "train_structures": 800,
    "validation_energy_rmse": 0.00167,
    "validation_force_rmse": 0.043,
}


def _lines(text: str) -> list[str]:
    return [line for line in re.split(r"[\r\n]", text) if line.strip()]


def test_the_epoch_bar_has_no_stray_separator(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = io.StringIO()
    bar = EpochProgress(3, stream=out, force=True, min_interval=0)
    bar.update(ROW)
    bar.close()
    lines = _lines(out.getvalue())
    assert lines and not any("[, " in line for line in lines), lines
    assert "val E 1.67 meV/atom F 43.00 meV/Å" in lines[-1]


def _narrow_terminal(columns: int) -> tuple[int, io.TextIOWrapper]:
    """A pseudo-terminal ``columns`` wide: (the fd to read from, the stream to write to)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return master, io.TextIOWrapper(os.fdopen(slave, "wb"), encoding="utf-8", write_through=True)


def _drain(fd: int) -> str:
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out += chunk
    return out.decode("utf-8", errors="replace")


def test_bars_fit_a_narrow_terminal():
    master, stream = _narrow_terminal(60)
    try:
        bar = EpochProgress(3, stream=stream, force=True, min_interval=0)
        bar.update(ROW)
        bar.close()
        text = _drain(master)
        feat = FeaturizeProgress(stream=stream, force=True, min_interval=0)
        feat({"kind": "start", "n_structures": 10, "n_atoms": 100}, 0, 2)
        feat({"seconds": 1.0, "n_structures": 5, "n_atoms": 50}, 1, 2)
        feat({"seconds": 1.0, "n_structures": 5, "n_atoms": 50}, 2, 2)
        text += _drain(master)
    finally:
        stream.close()
        os.close(master)
    lines = _lines(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text))
    assert lines and max(len(line) for line in lines) <= 60, lines


def test_the_dashboard_header_states_units_and_agrees_with_the_terminal():
    cols = {
        "epoch": [0, 1],
        "loss": [1.0, 0.5],
        "energy_rmse": [0.01, 0.00167],
        "force_rmse": [0.1, 0.043],
    }
    shown = shown_columns(cols)
    assert shown["energy_rmse"][-1] == pytest.approx(1.67) and shown["loss"] == [1.0, 0.5]
    header = training_header("validation", shown)
    assert f"E RMSE {milli(0.00167)} meV/atom" in header
    assert f"F RMSE {milli(0.043)} meV/Å" in header
    assert _METRIC_LABELS["energy_rmse"].endswith("(meV/atom)")
    assert shown_columns({"energy_rmse": [None]}) == {"energy_rmse": [None]}
