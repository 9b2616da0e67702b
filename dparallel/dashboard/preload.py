"""Scheduler preload: ``dask scheduler --preload dparallel.dashboard.preload``.

Importing it registers the dparallel pages (before the scheduler builds its dashboard);
:func:`dask_setup` then installs the event plugin and the JSON route. Only schedulers
import it: workers and clients never load bokeh through dparallel.
"""

from __future__ import annotations

from dparallel.dashboard import dask_setup, register_pages

__all__ = ["dask_setup"]

register_pages()
