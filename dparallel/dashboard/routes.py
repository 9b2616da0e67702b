"""Where dparallel's pages and JSON route are on the Dask dashboard: named once here for
the pages that register them, the plugin that serves the JSON, and the links the CLI
prints (:func:`dparallel.cluster.handle.dashboard_pages`)."""

from __future__ import annotations

__all__ = ["PAGE_ROUTES", "STATUS_ROUTE"]

#: Page paths relative to the dashboard root ("individual-" puts them in the "More" menu):
#: the featurization progress, then the training curves.
PAGE_ROUTES = ("individual-dparallel-progress", "individual-dparallel-training")
#: JSON route relative to the dashboard root (below its prefix).
STATUS_ROUTE = "dparallel/status.json"
