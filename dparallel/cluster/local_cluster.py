"""Start a local multi-process Dask cluster: its workers forked from the forkserver where
the platform has one, with the memory limit the partitions were sized by, GPU workers for
``gpus``, the dparallel dashboard pages loaded when first asked for, and (``return_early``)
the workers started in the background, the client connecting meanwhile, and the rest
started once the first one runs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple

from dask.system import CPU_COUNT
from distributed import Client, LocalCluster

from dparallel.cluster.expected import local_memory_limit
from dparallel.cluster.forkserver import forked_workers
from dparallel.cluster.gpus import add_gpu_workers, check_gpus, start_specified_workers
from dparallel.cluster.handle import ClusterHandle, dashboard_address, dashboard_link
from dparallel.cluster.main_guard import main_script_hint, refuse_while_bootstrapping
from dparallel.cluster.threads import register_threads, worker_env
from dparallel.dashboard.deferred_pages import PRELOAD as DEFERRED_DASHBOARD_PRELOAD
from dparallel.dashboard.deferred_pages import defer_pages
from dparallel.errors import ClusterError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dparallel.cluster.spec import ClusterSpec

__all__ = ["start_local"]

logger = logging.getLogger(__name__)


class _LocalStart(NamedTuple):
    """How :func:`start_local` starts a local cluster."""

    n_workers: int  # CPU workers in all
    early: bool  # return once one worker runs; the rest start in the background
    devices: list[str]  # one GPU worker each
    dashboard: str
    kwargs: dict[str, Any]  # more LocalCluster arguments
    forkserver_preload: Sequence[str]


def start_local(
    spec: ClusterSpec,
    worker_preload: Sequence[str] = (),
    forkserver_preload: Sequence[str] = (),
    return_early: bool = False,
) -> ClusterHandle:
    """Start a multi-process LocalCluster on the loopback interface, its workers forked
    from the forkserver where the platform has one (``return_early``: see
    :func:`~dparallel.cluster.connection.connect`)."""
    refuse_while_bootstrapping()
    n_workers = spec.n_workers or CPU_COUNT
    devices = check_gpus(spec.gpus) if spec.gpus else []
    dashboard = dashboard_address(spec)
    # every worker gets the limit expected_worker_memory planned by, also those started
    # after the first (Dask shares "auto" among the workers it starts at once)
    kwargs: dict[str, Any] = {"memory_limit": local_memory_limit(spec)}
    if worker_preload:
        kwargs["preload"] = list(worker_preload)
    # more workers than cores: their starts would only take the cores from the first tasks
    early = return_early and n_workers + len(devices) <= CPU_COUNT
    how = _LocalStart(n_workers, early, devices, dashboard, kwargs, forkserver_preload)
    try:
        try:
            cluster, starting, first = _launch(spec, how)
        except AssertionError:
            # distributed's LoopRunner asserts when its IO-loop thread has not started
            # within 10 s (seen on a saturated machine); that is transient: try once more.
            logger.warning("local cluster's event loop did not start in time; retrying once")
            cluster, starting, first = _launch(spec, how)
    except Exception as exc:
        raise _start_error(how, exc) from exc
    client: Client | None = None
    try:
        client = _client(cluster, spec.connect_timeout, early=first is not None)
        register_threads(client, spec)
        if first is not None:  # the client connected while the first worker started
            first.result()
    except BaseException as exc:
        if client is not None:
            client.close()
        if starting is not None:
            starting.join()
        cluster.close()
        if (
            isinstance(exc, Exception)
            and first is not None
            and first.done()
            and first.exception() is exc
        ):
            raise _start_error(how, exc) from exc  # as when LocalCluster itself raises it
        raise
    pages = defer_pages(cluster.scheduler)
    logger.info(
        "started local cluster: %d workers%s, dashboard %s",
        n_workers,
        f" and {len(devices)} GPU workers (devices {', '.join(devices)})" if devices else "",
        dashboard_link(client),
    )
    return ClusterHandle(
        client, cluster, "local", owns=True, pages=pages, starting=starting,
        planned=(n_workers + len(devices), len(devices)),
    )  # fmt: skip


def _start_error(how: _LocalStart, exc: Exception) -> ClusterError:
    """The error of a local cluster that did not start: its cause and, where it fits, the
    main script's missing guard."""
    return ClusterError(
        f"cannot start a local Dask cluster with {how.n_workers} workers "
        f"(dashboard {how.dashboard}): {type(exc).__name__}: {exc}{main_script_hint(exc)}"
    )


def _client(cluster: LocalCluster, timeout: float, early: bool) -> Client:
    """A client of ``cluster``; ``early``: connected to its scheduler without waiting for the
    workers that start (``Client(cluster)`` awaits the cluster, its starting workers too)."""
    if not early:
        return Client(cluster, timeout=timeout)
    client = Client(
        cluster.scheduler_address, loop=cluster.loop, security=cluster.security, timeout=timeout
    )
    client.cluster = cluster  # as Client(cluster) has it: its dashboard link, wait_for_workers
    return client


def _launch(
    spec: ClusterSpec, how: _LocalStart
) -> tuple[LocalCluster, threading.Thread | None, Future[None] | None]:
    """The cluster with its first workers running, or (``how.early``) with none yet; then
    also the thread that starts them (the first, then the rest; it leaves the forkserver
    setting when done) and what the first one's start came to."""
    with contextlib.ExitStack() as stack:  # leaves the forkserver setting unless handed on
        env = stack.enter_context(forked_workers(how.forkserver_preload, env=worker_env(spec)))
        cluster = LocalCluster(
            # early: the scheduler alone, so that the client connects while a worker starts
            n_workers=0 if how.early else how.n_workers,
            threads_per_worker=spec.threads_per_worker,
            processes=True,
            host="127.0.0.1",
            dashboard_address=how.dashboard,
            # HTTP server now, bokeh pages when first asked for (dashboard.deferred_pages)
            scheduler_kwargs={"preload": [DEFERRED_DASHBOARD_PRELOAD], "dashboard": False},
            env=env,
            **how.kwargs,
        )
        if not how.early:
            with contextlib.ExitStack() as on_error:
                on_error.callback(cluster.close)
                add_gpu_workers(cluster, how.devices)
                on_error.pop_all()  # started: the cluster stays open
            return cluster, None, None
        # the workers start in the background, still under the forkserver setting
        first: Future[None] = Future()
        thread = threading.Thread(
            target=_start_workers, args=(cluster, how, first, stack.pop_all()),
            name="dparallel-workers", daemon=True,
        )  # fmt: skip
        thread.start()
        return cluster, thread, first


def _start_workers(
    cluster: LocalCluster, how: _LocalStart, first: Future[None], forking: contextlib.ExitStack
) -> None:
    """Start ``cluster``'s first worker as its constructor would (``first`` gets the
    outcome), then the rest (in a background thread); then leave the forkserver setting
    (``forking``) that they started under."""
    with forking:
        try:
            cluster.worker_spec.update(cluster.new_worker_spec())
            cluster.sync(cluster._correct_state)  # what LocalCluster(n_workers=1) waits on
        except BaseException as exc:  # noqa: BLE001 - raised by start_local
            first.set_exception(exc)
            return
        first.set_result(None)
        try:
            for _ in range(how.n_workers - 1):
                cluster.worker_spec.update(cluster.new_worker_spec())
            add_gpu_workers(cluster, how.devices, wait=False)
            start_specified_workers(cluster)
        except Exception:  # the run goes on with the workers that started; Dask logs the cause
            logger.warning("some local workers did not start", exc_info=True)
