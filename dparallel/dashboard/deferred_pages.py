"""The dashboard pages of a local cluster, attached once its workers run.

distributed builds its bokeh dashboard inside ``Scheduler.__init__``, which is costly
(docs/deploy.md); a local cluster's scheduler lives in the driver, so every local run
paid it before a worker could register. The local clusters of
:func:`dparallel.cluster.connect` therefore start their scheduler with its HTTP server
(``/health``, Dask's JSON routes and ``/dparallel/status.json``; this module is its
preload) but without the pages, and :func:`attach_pages` adds them, Dask's and
dparallel's, once the workers are up (the page URLs answer 404 until then).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

# the preload hook: collect dparallel events and serve /dparallel/status.json (no bokeh)
from dparallel.dashboard.plugin import install as dask_setup

__all__ = ["PRELOAD", "attach_pages", "dask_setup"]

logger = logging.getLogger(__name__)

#: Scheduler preload of local clusters: the event plugin and the JSON route, no bokeh.
PRELOAD = "dparallel.dashboard.deferred_pages"


def attach_pages(scheduler: Any, prefix: str = "/") -> threading.Event:
    """Import bokeh in a daemon thread, then add the dashboard pages to ``scheduler`` (a
    running, in-process scheduler started with ``dashboard=False``) on its event loop.
    Returns an event set once the pages are served; failures are logged (the dashboard is
    an aid, not the job) and leave it unset."""
    attached = threading.Event()

    def attach() -> None:
        from distributed.dashboard.scheduler import connect

        try:
            connect(scheduler.http_application, scheduler.http_server, scheduler, prefix=prefix)
        except Exception:  # the run goes on without pages
            logger.warning("the dashboard pages could not be attached", exc_info=True)
            return
        attached.set()
        logger.info("dashboard pages attached")

    def load() -> None:
        from dparallel.dashboard import register_pages

        try:
            if register_pages():  # imports bokeh and distributed's dashboard: the slow part
                scheduler.loop.add_callback(attach)
        except Exception:  # the run goes on without pages
            logger.warning("the dashboard pages could not be loaded", exc_info=True)

    threading.Thread(target=load, name="dparallel-dashboard-pages", daemon=True).start()
    return attached
