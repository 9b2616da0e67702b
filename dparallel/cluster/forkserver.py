"""The forkserver local Dask workers are forked from, instead of each spawned cold.

Dask spawns every local worker: a fresh interpreter that imports distributed, numpy,
numba and zarr and loads the compiled kernels before its first task (docs/deploy.md).
:func:`start_forkserver` starts Python's forkserver once per process, importing (and so
warming up) modules before any worker exists, at the top of a command so that this
overlaps the driver's own start; :func:`forked_workers` makes the local cluster of
:func:`dparallel.cluster.connect` fork its workers from it.

A forked worker has the environment of the server's start, updated in the worker with
the driver's environment of the moment its cluster starts (as a spawned worker would
see it); only variables read at import time by what the server preloaded (numpy's BLAS,
numba) keep their values from the server's start. ``DPARALLEL_WARM_WORKERS=0``, a
platform without ``forkserver``, or a Dask config that names another
``distributed.worker.multiprocessing-method`` than the default ``spawn`` keep Dask's own
way. This module imports neither ``distributed`` nor ``dask`` at import time.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import signal
from typing import TYPE_CHECKING, Any

from dparallel.config import restore_environ

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

__all__ = [
    "BASE_PRELOAD",
    "ENV_SCHEDULER_ADDRESS",
    "ENV_WARM_WORKERS",
    "enabled",
    "forked_workers",
    "server_pid",
    "start_forkserver",
    "stop_forkserver",
]

logger = logging.getLogger(__name__)

#: Environment variable that names a running scheduler (read by Dask itself, too).
ENV_SCHEDULER_ADDRESS = "DASK_SCHEDULER_ADDRESS"
#: Set to ``0`` to start local workers the way Dask does by default (``spawn``).
ENV_WARM_WORKERS = "DPARALLEL_WARM_WORKERS"
#: What the forkserver preloads whatever else it is given: its own fast exit
#: (:mod:`dparallel.cluster.forkserver_exit`) and what every worker imports.
BASE_PRELOAD = ("dparallel.cluster.forkserver_exit", "distributed")
#: Thread variables a worker needs before numpy is imported (Dask's pre-spawn default).
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def enabled() -> bool:
    """Whether local workers are forked from the forkserver on this platform and setting."""
    if os.environ.get(ENV_WARM_WORKERS, "1").strip() == "0":
        return False
    return "forkserver" in multiprocessing.get_all_start_methods()


def server_pid() -> int | None:
    """PID of this process's forkserver while it runs, else ``None``."""
    # the module's one ForkServer; its pid attribute is private (None until started)
    server = multiprocessing.forkserver._forkserver
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return None
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return None if done else pid


def start_forkserver(preload: Sequence[str] = (), threads: int = 1) -> bool:
    """Start the forkserver now (returning at once), importing :data:`BASE_PRELOAD` and
    ``preload`` in it, with ``threads`` OpenMP/MKL/OpenBLAS threads as Dask sets them.

    True when this call started it; False when it already runs (a process has one
    forkserver: its preload is kept), :func:`enabled` says no, or it cannot start (logged;
    workers are then spawned).
    """
    if not enabled() or server_pid() is not None:
        return False
    modules = list(dict.fromkeys([*BASE_PRELOAD, *preload]))
    saved = {name: os.environ.get(name) for name in _THREAD_VARS}
    os.environ.update(dict.fromkeys(_THREAD_VARS, str(threads)))  # the server inherits it
    try:
        multiprocessing.set_forkserver_preload(modules)
        multiprocessing.forkserver.ensure_running()
    except Exception:  # an optimisation only: workers are then spawned
        logger.warning("cannot start the forkserver for local workers", exc_info=True)
        return False
    finally:
        restore_environ(saved)
    logger.debug("forkserver %s started, preloading %s", server_pid(), modules)
    return True


def stop_forkserver() -> None:
    """Stop this process's forkserver at once, even while it still imports its preload (a
    command refused after starting it); nothing when none runs."""
    pid = server_pid()
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)  # it reads its stop signal only once preloaded
    server: Any = multiprocessing.forkserver._forkserver  # its _stop is private, untyped
    server._stop()  # reaps it, forgets its address


@contextlib.contextmanager
def forked_workers(
    preload: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> Iterator[dict[str, str]]:
    """While a ``LocalCluster`` starts in this block, its nannies fork workers from the
    forkserver (started here with ``preload`` if it is not running yet).

    Yields the environment to pass as the cluster's ``env``: ``env`` over the driver's
    current environment when the workers are forked, ``env`` alone otherwise. A worker
    that a nanny restarts later is spawned as Dask does by default.
    """
    import dask
    import distributed.utils

    method = dask.config.get("distributed.worker.multiprocessing-method")
    threads = int((env or {}).get("OMP_NUM_THREADS", "1"))
    if method != "spawn" or not enabled():
        yield dict(env or {})
        return
    start_forkserver(preload, threads=threads)
    if server_pid() is None:
        yield dict(env or {})
        return
    # distributed's first forkserver context imports every optional package (pandas,
    # bokeh, ...) here to set its own preload list; the server already runs with ours
    distributed.utils._forkserver_preload_set = True
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        yield {**os.environ, **(env or {})}
