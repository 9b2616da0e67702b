"""What a run holds of its Dask cluster (:class:`ClusterHandle`: the client, the cluster
:func:`~dparallel.cluster.connection.connect` started, the plugins it registered, closing
what it opened) and where the cluster's dashboard and dparallel's pages are.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dparallel.dashboard.routes import PAGE_ROUTES, STATUS_ROUTE

if TYPE_CHECKING:
    import threading

    from distributed import Client

    from dparallel.cluster.spec import ClusterSpec
    from dparallel.dashboard.deferred_pages import DeferredPages

__all__ = ["ClusterHandle", "dashboard_address", "dashboard_link", "dashboard_pages"]

logger = logging.getLogger(__name__)


class ClusterHandle:
    """A connected ``client`` and, when :func:`~dparallel.cluster.connection.connect`
    started it, the ``cluster`` it owns (``LocalCluster``, ``SLURMCluster``; else
    ``None``); ``source`` says how the cluster was found (``"client"``, ``"scheduler"``,
    ``"scheduler_file"``, ``"env"``, ``"address"``, ``"slurm"`` or ``"local"``). A context
    manager; :meth:`close` never closes a cluster or client the caller passed in.
    """

    def __init__(
        self,
        client: Client,
        cluster: Any | None,
        source: str,
        *,
        owns: bool,
        pages: DeferredPages | None = None,
        starting: threading.Thread | None = None,
        planned: tuple[int, int] = (0, 0),
        dashboard_host: str | None = None,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.source = source
        self._owns = owns
        self._pages = pages  # a local cluster's dashboard pages, loaded when first asked for
        self._starting = starting  # starts the workers after the first (return_early)
        #: (workers, of which GPU workers) a cluster started here will have once all run;
        #: (0, 0) for a cluster found running
        self.planned_workers, self.planned_gpus = planned
        #: worker plugins this handle registered on a cluster it does not own: removed
        #: (their teardown restores the workers) when it closes
        self.plugins: list[str] = []
        #: the host the dashboard listens on where it is not the scheduler's (a SLURM
        #: cluster's scheduler listens for its workers, its dashboard on 127.0.0.1)
        self.dashboard_host = dashboard_host

    def wait_for_workers(self, timeout: float | None = None) -> bool:
        """Wait until every worker a local cluster started with ``return_early`` runs
        (True at once otherwise); False if not within ``timeout`` s."""
        if self._starting is not None:
            self._starting.join(timeout)
            return not self._starting.is_alive()
        return True

    def wait_for_pages(self, timeout: float | None = None) -> bool:
        """Wait until the dashboard's pages are served: a local cluster loads them when first
        asked for, by a browser or by this call (:mod:`dparallel.dashboard.deferred_pages`);
        other schedulers serve theirs from the start (True at once). False if not within
        ``timeout`` s."""
        return True if self._pages is None else self._pages.wait(timeout)

    @property
    def dashboard_link(self) -> str | None:
        """:func:`dashboard_link` of the client."""
        return dashboard_link(self.client, self.dashboard_host)

    @property
    def dashboard_pages(self) -> dict[str, str]:
        """:func:`dashboard_pages` of the client."""
        return dashboard_pages(self.client, self.dashboard_host)

    @property
    def n_workers(self) -> int:
        """Number of workers currently connected to the scheduler."""
        return len(self.client.scheduler_info(n_workers=-1).get("workers", {}))

    def close(self, timeout: float = 30.0) -> None:
        """Remove the worker plugins this handle registered and close what
        :func:`~dparallel.cluster.connection.connect` opened (idempotent); a client passed
        in stays open."""
        self.wait_for_workers(timeout)  # never close a cluster in the middle of its start
        plugins, self.plugins = self.plugins, []
        for name in plugins:
            try:
                self.client.unregister_worker_plugin(name)
            except Exception:  # a scheduler gone: nothing left to restore
                logger.debug("could not remove worker plugin %s", name, exc_info=True)
        if not self._owns:
            return
        self._owns = False
        try:
            self.client.close(timeout=timeout)
        finally:
            if self.cluster is not None:
                self.cluster.close(timeout=timeout)

    def __enter__(self) -> ClusterHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        address = getattr(self.client.scheduler, "address", None)
        return f"ClusterHandle(source={self.source!r}, scheduler={address!r})"


def dashboard_link(client: Client, host: str | None = None) -> str | None:
    """The dashboard URL of ``client``'s scheduler (what the CLI prints), or ``None``;
    ``host``: where the dashboard listens, when not on the scheduler's host."""
    from distributed.utils import format_dashboard_link

    try:
        info = client.scheduler_info(n_workers=0)
    except Exception:  # noqa: BLE001 - a closed client simply has no link
        return None
    if "dashboard" not in info.get("services", {}):
        return None
    if host is not None:
        return str(format_dashboard_link(host, info["services"]["dashboard"]))
    return str(client.dashboard_link)


def dashboard_pages(client: Client, host: str | None = None) -> dict[str, str]:
    """URLs of the Dask status page and the dparallel pages (empty without a dashboard).

    Keys: ``"status"``, ``"progress"``, ``"training"``, ``"json"``. The dparallel pages
    exist only on schedulers started with the ``dparallel.dashboard`` preload.
    """
    link = dashboard_link(client, host)
    if link is None:
        return {}
    base = link.rsplit("/", 1)[0] if link.endswith("/status") else link.rstrip("/")
    return {
        "status": link,
        "progress": f"{base}/{PAGE_ROUTES[0]}",
        "training": f"{base}/{PAGE_ROUTES[1]}",
        "json": f"{base}/{STATUS_ROUTE}",
    }


def dashboard_address(spec: ClusterSpec) -> str:
    """Where a scheduler started here serves its dashboard: a bare ``":PORT"`` on the
    loopback interface (``":0"``: a free port), else as given."""
    dashboard = spec.dashboard_address
    return "127.0.0.1" + dashboard if dashboard.startswith(":") else dashboard
