"""Resolve where Dask work runs and return a connected
:class:`~dparallel.cluster.handle.ClusterHandle`.

Resolution order (first match wins; :func:`dparallel.cluster.where.connection_kind` is
this order, asked by :func:`connect`, :func:`expected_workers` and the CLI alike):

1. an explicit ``client=``;
2. ``scheduler=`` address or ``scheduler_file=`` (the CLI's ``--scheduler`` / ``--scheduler-file``);
3. the ``DASK_SCHEDULER_ADDRESS`` environment variable;
4. the spec's ``kind``: ``address`` (``spec.address`` / ``spec.scheduler_file``) or ``slurm``
   (dask-jobqueue, optional extra ``dparallel[slurm]``);
5. a local multi-process cluster (:mod:`dparallel.cluster.local_cluster`): processes,
   ``threads_per_worker`` threads each, one worker per core unless ``n_workers`` says
   otherwise, dashboard bound to 127.0.0.1, with the dparallel dashboard pages preloaded.

A running scheduler is reached through :mod:`dparallel.cluster.scheduler_client`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from distributed import Client
from distributed.client import ensure_default_client

from dparallel.cluster.forkserver import ENV_SCHEDULER_ADDRESS
from dparallel.cluster.given_client import check_where, note_unused_default_client
from dparallel.cluster.handle import ClusterHandle, dashboard_address
from dparallel.cluster.local_cluster import start_local
from dparallel.cluster.scheduler_client import (
    client_security,
    read_scheduler_file,
    scheduler_client,
)
from dparallel.cluster.slurm import import_jobqueue, slurm_cluster, submit_jobs
from dparallel.cluster.spec import ClusterSpec
from dparallel.cluster.threads import (
    TorchThreadsPlugin,
    plugin_registered,
    register_threads,
    worker_env,
)
from dparallel.cluster.where import connection_kind
from dparallel.errors import ClusterError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = [
    "connect",
    "connect_in_background",
    "discard_connection",
]

logger = logging.getLogger(__name__)

#: Scheduler preload that adds the dparallel pages to the Dask dashboard (imported by the
#: scheduler only: this package never imports bokeh). Local clusters use
#: :mod:`dparallel.dashboard.deferred_pages` instead: their pages are attached when first asked for.
DASHBOARD_PRELOAD = "dparallel.dashboard.preload"


def connect(
    spec: ClusterSpec | None = None,
    *,
    client: Client | None = None,
    scheduler: str | None = None,
    scheduler_file: str | os.PathLike[str] | None = None,
    worker_preload: Sequence[str] = (),
    forkserver_preload: Sequence[str] = (),
    return_early: bool = False,
) -> ClusterHandle:
    """Connect to (or start) the cluster a run uses; see the module docstring for the order.

    ``spec``: the workflow's ``cluster:`` section (``None``: local). ``client``: used as is
    (the handle never closes it). ``scheduler`` (``tcp://host:8786``) or ``scheduler_file``
    (written by ``dask scheduler --scheduler-file``) override the spec. A local cluster
    started here preloads ``worker_preload`` in its workers (e.g.
    :data:`dparallel.cluster.worker_exit.FAST_EXIT_PRELOAD`) and ``forkserver_preload`` in
    the forkserver it starts (:mod:`dparallel.cluster.forkserver`); with ``return_early``
    (and no more workers than cores) it returns once its first worker runs (its client
    connected while that worker started), the others
    starting in the background (:meth:`ClusterHandle.wait_for_workers`).

    Raises :class:`ClusterError` when the scheduler cannot be reached within
    ``spec.connect_timeout`` seconds, a certificate or scheduler file is missing, or
    dask-jobqueue is not installed.
    """
    check_where(spec, client)
    spec = spec if spec is not None else ClusterSpec()
    if client is not None:
        handle = ClusterHandle(client, None, "client", owns=False)
        # the caller's cluster: its workers get their own budget back when the handle that
        # set it closes (not one that found it set: another run on the client still uses it)
        present = spec.torch_threads is not None and plugin_registered(
            client, TorchThreadsPlugin.name
        )
        added = register_threads(client, spec) and not present
        handle.plugins = [TorchThreadsPlugin.name] if added else []
        return handle
    with _collected_then_paused_gc():
        return _connect_new(
            spec, worker_preload, forkserver_preload, scheduler, scheduler_file, return_early
        )


def connect_in_background(**kwargs: Any) -> Future[ClusterHandle]:
    """:func:`connect` (same arguments) in a daemon thread; returns at once, so that the
    start of a local cluster (docs/deploy.md) overlaps the command's own reading and store
    set-up. Whoever takes the future's result (the handle, or the exception) closes the
    handle (:func:`discard_connection` when it is not needed after all)."""
    future: Future[ClusterHandle] = Future()
    where = {k: kwargs.get(k) for k in ("client", "scheduler", "scheduler_file")}
    if connection_kind(kwargs.get("spec"), **where) == "slurm":
        with contextlib.suppress(ClusterError):  # not installed: the thread says so
            import_jobqueue()  # here, in the caller's thread: it sets a signal handler

    def start() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(connect(**kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever takes the result
            future.set_exception(exc)

    threading.Thread(target=start, name="dparallel-connect", daemon=True).start()
    return future


def discard_connection(future: Future[ClusterHandle] | None) -> None:
    """Close the handle of :func:`connect_in_background` once made (ignore its failure)."""
    if future is None:
        return
    try:
        handle = future.result()
    except Exception:  # noqa: BLE001 - a connection nobody uses: its failure does not matter
        return
    handle.close()


@contextlib.contextmanager
def _collected_then_paused_gc() -> Iterator[None]:
    """Collect garbage now, then keep the cyclic GC off while a client/cluster starts.

    distributed's ``LoopRunner`` starts its IO loop holding a class-wide lock, and
    ``Client.__del__`` closes the client, which takes the same lock: an earlier Client
    (closed or not) collected by the cyclic GC in the middle of a start deadlocks the
    thread (seen: a test run hung in ``LocalCluster.__init__`` → ``Client.__del__``).
    """
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _connect_new(
    spec: ClusterSpec,
    worker_preload: Sequence[str],
    forkserver_preload: Sequence[str],
    scheduler: str | None,
    scheduler_file: str | os.PathLike[str] | None,
    return_early: bool = False,
) -> ClusterHandle:
    """:func:`connect` for every case that makes a new client."""
    kind = connection_kind(spec, scheduler=scheduler, scheduler_file=scheduler_file)
    if kind == "scheduler":
        return _connect_remote(str(scheduler), spec, "scheduler")
    if kind == "scheduler_file":
        address = read_scheduler_file(scheduler_file)  # type: ignore[arg-type]  # not None
        return _connect_remote(address, spec, "scheduler_file")
    if kind == "env":
        return _connect_remote(os.environ[ENV_SCHEDULER_ADDRESS], spec, "env")
    if kind == "address":
        address = spec.address or read_scheduler_file(spec.scheduler_file)  # type: ignore[arg-type]
        return _connect_remote(address, spec, "address")
    if kind == "slurm":
        return _start_slurm(spec)
    note_unused_default_client()  # a notebook's Client() is not ours to take
    return start_local(spec, worker_preload, forkserver_preload, return_early)


def _connect_remote(address: str, spec: ClusterSpec, source: str) -> ClusterHandle:
    """A handle of the running scheduler at ``address`` (:func:`scheduler_client`), its
    client the default one, the torch-thread budget registered."""
    client = scheduler_client(address, spec)
    ensure_default_client(client)
    registered = register_threads(client, spec)
    logger.info("connected to scheduler %s (%s)", address, source)
    handle = ClusterHandle(client, None, source, owns=True)
    # a cluster others use too: its workers get their own budget back when this run ends
    handle.plugins = [TorchThreadsPlugin.name] if registered else []
    return handle


def _start_slurm(spec: ClusterSpec) -> ClusterHandle:
    """Submit workers to SLURM through dask-jobqueue (:mod:`dparallel.cluster.slurm`)."""
    cluster = _slurm_cluster(spec)
    submit_jobs(cluster, spec.slurm.jobs)
    client = Client(cluster, timeout=spec.connect_timeout)
    register_threads(client, spec)
    # its scheduler listens where the workers reach it, its dashboard where it was told
    host = dashboard_address(spec).rpartition(":")[0].strip("[]")
    shown = host if host not in ("", "0.0.0.0", "::") else None
    return ClusterHandle(client, cluster, "slurm", owns=True, dashboard_host=shown)


def _slurm_cluster(spec: ClusterSpec) -> Any:
    """:func:`~dparallel.cluster.slurm.slurm_cluster` with the thread exports, TLS and
    dashboard (with dparallel's pages) of ``spec``."""
    scheduler = {"dashboard_address": dashboard_address(spec), "preload": [DASHBOARD_PRELOAD]}
    return slurm_cluster(spec, worker_env(spec), client_security(spec.tls), scheduler)
