"""The dparallel pages on the Dask dashboard, and the events that feed them.

Use as a scheduler preload: ``dask scheduler --preload dparallel.dashboard`` (the local
cluster of :func:`dparallel.cluster.connect` adds it automatically). Importing this module
registers the pages; :func:`dask_setup` adds the event-collecting scheduler plugin and the
JSON route ``/dparallel/status.json``.

Pages (below the dashboard address, also listed under "More"):
``/individual-dparallel-progress`` and ``/individual-dparallel-training``.

Tasks and clients publish with :func:`publish_progress_start`, :func:`publish_progress`
and :func:`publish_train_metrics` (no-ops without a cluster). They live in
:mod:`dparallel.cluster.events` and are re-exported here: importing this package registers
the pages, which loads bokeh (0.4 s), so worker tasks import the events module instead.
"""

from __future__ import annotations

import logging
from typing import Any

from dparallel.cluster.events import (
    TOPIC_PROGRESS,
    TOPIC_TRAIN,
    publish_progress,
    publish_progress_start,
    publish_train_metrics,
)
from dparallel.dashboard.state import DashboardState

__all__ = [
    "PAGE_ROUTES",
    "STATUS_ROUTE",
    "TOPIC_PROGRESS",
    "TOPIC_TRAIN",
    "DashboardState",
    "dask_setup",
    "publish_progress",
    "publish_progress_start",
    "publish_train_metrics",
    "register_pages",
]

logger = logging.getLogger(__name__)

#: Page paths relative to the dashboard root.
PAGE_ROUTES = ("individual-dparallel-progress", "individual-dparallel-training")
#: JSON route relative to the dashboard root.
STATUS_ROUTE = "dparallel/status.json"


def register_pages() -> bool:
    """Add the pages to distributed's dashboard applications; ``False`` without bokeh."""
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


# Must happen at import: the scheduler imports preloads before it builds its dashboard.
register_pages()
