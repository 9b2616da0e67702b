"""The dashboard pages of a local cluster, attached when they are first asked for.

distributed builds its bokeh dashboard inside ``Scheduler.__init__``, which is costly
(docs/deploy.md); a local cluster's scheduler lives in the driver, so every local run
paid it before a worker could register. The local clusters of
:func:`dparallel.cluster.connect` therefore start their scheduler with its HTTP server
(``/health``, Dask's JSON routes and ``/dparallel/status.json``; this module is its
preload) but without the pages. :func:`defer_pages` adds them, Dask's and dparallel's,
when a browser first asks for one (or :meth:`DeferredPages.wait` is called): importing
bokeh in the driver while the tasks run took the workers' cores and the scheduler's
event loop (a 2-worker run on 2 cores waited ~0.3-0.6 s between its tasks), and a short
run that nobody watches never needs them. That first request waits for the pages, then
is sent to the same address again, now served by bokeh.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from tornado import web
from tornado.routing import Matcher, Rule

# the preload hook: collect dparallel events and serve /dparallel/status.json (no bokeh)
from dparallel.dashboard.plugin import install as dask_setup

__all__ = ["PRELOAD", "DeferredPages", "dask_setup", "defer_pages"]

logger = logging.getLogger(__name__)

#: Scheduler preload of local clusters: the event plugin and the JSON route, no bokeh.
PRELOAD = "dparallel.dashboard.deferred_pages"
#: Seconds the first page request waits for the pages to load before it is answered 503.
PAGE_LOAD_WAIT_S = 60.0


class DeferredPages:
    """Dask's and dparallel's bokeh pages for ``scheduler`` (a running, in-process
    scheduler started with ``dashboard=False``), loaded once :meth:`start` is called.
    ``attached`` is set once they are served; ``finished`` once loading ended either way
    (failures are logged: the dashboard is an aid, not the job)."""

    def __init__(self, scheduler: Any, prefix: str = "/") -> None:
        self.scheduler = scheduler
        self.prefix = prefix
        self.attached = threading.Event()
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._started = False

    def start(self) -> None:
        """Import bokeh in a daemon thread, then add the pages on the scheduler's event
        loop (once; later calls do nothing)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._load, name="dparallel-dashboard-pages", daemon=True).start()

    def wait(self, timeout: float | None = None) -> bool:
        """Start loading the pages if nobody asked for them yet and wait until they are
        served; False if not within ``timeout`` s or if they cannot be."""
        self.start()
        return self.attached.wait(timeout)

    def _load(self) -> None:
        from dparallel.dashboard import register_pages

        try:
            if register_pages():  # imports bokeh and distributed's dashboard: the slow part
                self.scheduler.loop.add_callback(self._attach)
                return
        except Exception:  # the run goes on without pages
            logger.warning("the dashboard pages could not be loaded", exc_info=True)
        self.finished.set()

    def _attach(self) -> None:
        from distributed.dashboard.scheduler import connect

        scheduler = self.scheduler
        try:
            connect(scheduler.http_application, scheduler.http_server, scheduler, self.prefix)
        except Exception:  # the run goes on without pages
            logger.warning("the dashboard pages could not be attached", exc_info=True)
        else:
            self.attached.set()
            logger.info("dashboard pages attached")
        finally:
            self.finished.set()


class _Pending(Matcher):
    """Matches every GET (what a browser asks for a page) while the pages have not been
    attached; other methods get the scheduler's own answer (404)."""

    def __init__(self, pages: DeferredPages) -> None:
        self.pages = pages

    def match(self, request: Any) -> dict[str, Any] | None:
        return None if request.method != "GET" or self.pages.attached.is_set() else {}


class _PendingPlotList(Matcher):
    """Matches a GET of Dask's list of pages (``individual-plots.json``, which
    dask-labextension polls) while the pages have not been attached: distributed's own
    handler would import bokeh and answer an empty list."""

    def __init__(self, pages: DeferredPages, path: str) -> None:
        self.pages = pages
        self.path = path

    def match(self, request: Any) -> dict[str, Any] | None:
        pending = request.method == "GET" and not self.pages.attached.is_set()
        return {} if pending and request.path == self.path else None


class _FirstPageRequest(web.RequestHandler):
    """A request no other route answers, before the pages are attached: load them, wait,
    then send the browser to the same address (404 there if no page has it)."""

    def initialize(self, pages: DeferredPages) -> None:
        self.pages = pages

    async def get(self, *args: Any, **kwargs: Any) -> None:
        self.pages.start()
        deadline = time.monotonic() + PAGE_LOAD_WAIT_S
        while not self.pages.finished.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.pages.attached.is_set():
            self.redirect(self.request.uri or "/")
        elif self.pages.finished.is_set():
            raise web.HTTPError(404)
        else:
            raise web.HTTPError(503, reason="dashboard pages still loading")


def defer_pages(scheduler: Any, prefix: str = "/") -> DeferredPages:
    """The pages of ``scheduler``, loaded when a request that no other route answers
    arrives (every page's first one) or :meth:`DeferredPages.wait` is called."""
    pages = DeferredPages(scheduler, prefix)
    app = getattr(scheduler, "http_application", None)
    if app is None or not hasattr(app, "add_application"):  # no HTTP server: no pages
        pages.finished.set()
        return pages
    # asked after the scheduler's own routes (distributed's RoutingApplication tries its
    # sub-applications, in order, for what it does not route); bokeh's comes after it
    app.add_application(
        web.Application([Rule(_Pending(pages), _FirstPageRequest, {"pages": pages})])
    )
    # the list of pages is one of the scheduler's routes: asked before them
    plot_list = _PendingPlotList(pages, prefix.rstrip("/") + "/individual-plots.json")
    app.default_router.rules.insert(0, Rule(plot_list, _FirstPageRequest, {"pages": pages}))
    return pages
