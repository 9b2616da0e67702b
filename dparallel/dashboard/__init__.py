"""The dparallel pages on the Dask dashboard, and the events that feed them.

Scheduler preload: ``dask scheduler --preload dparallel.dashboard.preload`` (the clusters
:func:`dparallel.cluster.connect` starts add it themselves), or ``--preload
dparallel.dashboard``: the pages (which load bokeh) are registered only when distributed's
preloading imports this package. :func:`dask_setup` adds the event-collecting scheduler
plugin and the JSON route ``/dparallel/status.json``. The pages, also under "More":
``/individual-dparallel-progress`` and ``/individual-dparallel-training``.

Tasks and clients publish through :mod:`dparallel.dashboard.events` (no-ops without a
cluster); importing it, or this package, loads neither bokeh nor ``distributed``.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import FrameType

from dparallel.dashboard.events import (
    TOPIC_PROGRESS,
    TOPIC_TRAIN,
    epoch_publisher,
    publish_progress,
    publish_progress_end,
    publish_progress_start,
    publish_train_metrics,
)
from dparallel.dashboard.routes import PAGE_ROUTES, STATUS_ROUTE
from dparallel.dashboard.state import DashboardState

__all__ = [
    "PAGE_ROUTES",
    "STATUS_ROUTE",
    "TOPIC_PROGRESS",
    "TOPIC_TRAIN",
    "DashboardState",
    "dask_setup",
    "epoch_publisher",
    "publish_progress",
    "publish_progress_end",
    "publish_progress_start",
    "publish_train_metrics",
    "register_pages",
]

logger = logging.getLogger(__name__)


def register_pages() -> bool:
    """Add the pages to distributed's dashboard applications (``False`` without bokeh),
    before the scheduler builds its dashboard: at preload import time."""
    try:
        from distributed.dashboard.scheduler import applications

        from dparallel.dashboard.pages import PAGES
    except ImportError as exc:  # bokeh missing or incompatible: the Dask dashboard is off too
        logger.info("dparallel dashboard pages unavailable: %s", exc)
        return False
    for route, fn in PAGES.items():
        applications.setdefault(route, fn)
    return True


def dask_setup(scheduler: Any) -> None:
    """Preload hook: collect dparallel events and serve ``/dparallel/status.json``."""
    from dparallel.dashboard.plugin import install

    install(scheduler)
    logger.info("dparallel dashboard pages: %s", ", ".join(PAGE_ROUTES))


def _imported_by_preloading() -> bool:
    """Whether distributed's preloading imports this package as the preload itself
    (``--preload dparallel.dashboard``), not as the parent of another preload module
    (:mod:`dparallel.dashboard.deferred_pages` must not load bokeh)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "distributed.preloading":
            return frame.f_locals.get("name") == __name__
        frame = frame.f_back
    return False


if _imported_by_preloading():
    register_pages()
