"""The dashboard pages of a local cluster, attached once its workers run.

distributed builds its bokeh dashboard inside ``Scheduler.__init__``: importing bokeh and
the dashboard's components is costly (docs/deploy.md), and in a local cluster the scheduler
lives in the driver, so every local featurize paid it before a single worker could register.
The local clusters of :func:`dparallel.cluster.connect` therefore start their scheduler
with its HTTP server (``/health``, Dask's JSON routes and ``/dparallel/status.json``, from
this module as the scheduler preload) but without the bokeh pages, and
:func:`attach_pages` adds them — Dask's own and dparallel's, as ``Scheduler.__init__``
would have — once the workers are up: bokeh is imported in a background thread, the pages
are connected on the scheduler's event loop. Until then the page URLs answer 404.
Schedulers started by ``dask scheduler --preload dparallel.dashboard`` are not concerned:
they build their dashboard as usual.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["PRELOAD", "attach_pages", "dask_setup"]

logger = logging.getLogger(__name__)

#: Scheduler preload of local clusters: the event plugin and the JSON route, no bokeh.
PRELOAD = "dparallel.dashboard.deferred_pages"


def dask_setup(scheduler: Any) -> None:
    """Preload hook: collect dparallel events and serve ``/dparallel/status.json``."""
    from dparallel.dashboard.plugin import install

    install(scheduler)


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
