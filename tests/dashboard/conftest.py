"""Fixtures of the dashboard tests."""

from __future__ import annotations

import pytest

from dparallel.dashboard import DashboardState


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> DashboardState:
    """Every event a publisher sends, into a state, as a scheduler would."""
    import dparallel.dashboard.events as events

    s = DashboardState()

    class Scheduler:
        status = "running"

        def log_event(self, topic: str, msg: dict) -> None:
            s.add(float(s.n_events), topic, msg)

    monkeypatch.setattr(events, "_resolve_target", lambda target: (Scheduler(), "client"))
    return s
