"""Scheduler side: a plugin that keeps :class:`DashboardState` and the JSON route."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.http.utils import RequestHandler

from dparallel.dashboard.events import TOPIC_PROGRESS, TOPIC_TRAIN
from dparallel.dashboard.routes import STATUS_ROUTE
from dparallel.dashboard.state import DashboardState

__all__ = ["PLUGIN_NAME", "STATUS_ROUTE", "DashboardPlugin", "StatusHandler", "state_of"]

logger = logging.getLogger(__name__)

PLUGIN_NAME = "dparallel-dashboard"


class DashboardPlugin(SchedulerPlugin):
    """Feeds every ``dparallel-*`` event the scheduler logs into a :class:`DashboardState`."""

    name = PLUGIN_NAME

    def __init__(self) -> None:
        self.state = DashboardState()

    async def start(self, scheduler: Any) -> None:
        """Replay events logged before the plugin was added."""
        _replay(self.state, scheduler)

    def log_event(self, topic: str, msg: Any) -> None:
        """Record an event (called by the scheduler for every logged event)."""
        if topic in (TOPIC_PROGRESS, TOPIC_TRAIN):
            self.state.add(time.time(), topic, msg)


def state_of(scheduler: Any) -> DashboardState:
    """The plugin's state, or one rebuilt from the scheduler's event log without the plugin."""
    plugin = scheduler.plugins.get(PLUGIN_NAME)
    if isinstance(plugin, DashboardPlugin):
        return plugin.state
    return _replay(DashboardState(), scheduler)


def _replay(state: DashboardState, scheduler: Any) -> DashboardState:
    """``state`` fed every dparallel event in the scheduler's log."""
    for topic in (TOPIC_PROGRESS, TOPIC_TRAIN):
        for t, msg in scheduler.get_events(topic):
            state.add(t, topic, msg)
    return state


class StatusHandler(RequestHandler):
    """``GET /dparallel/status.json``: progress and training summaries as JSON."""

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(state_of(self.server).to_json()))


def install(scheduler: Any) -> None:
    """Add the plugin and the JSON route to a running scheduler (idempotent)."""
    if PLUGIN_NAME not in scheduler.plugins:
        scheduler.add_plugin(DashboardPlugin(), name=PLUGIN_NAME, idempotent=True)
    app = getattr(scheduler, "http_application", None)
    if app is None:
        logger.warning("scheduler has no HTTP server: %s not served", STATUS_ROUTE)
        return
    if getattr(app, "_dparallel_routes", False):
        return
    # Any dashboard prefix (``--dashboard-prefix``) in front of the route is accepted.
    route = r"(?:/[^?]*)?/" + STATUS_ROUTE.replace(".", r"\.")
    app.add_handlers(r".*", [(route, StatusHandler, {"dask_server": scheduler})])
    app._dparallel_routes = True
