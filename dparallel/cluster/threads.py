"""Torch thread budget inside Dask tasks.

``torch.set_num_threads`` affects only the OS thread that calls it, so the budget is
applied inside each task (:func:`ensure_torch_threads`, or ``with torch_threads(n):``).
It comes from ``DPARALLEL_TORCH_THREADS``, which :class:`TorchThreadsPlugin` (registered
by :func:`dparallel.cluster.connect`) or the worker's environment sets.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import WorkerPlugin

from dparallel.config import restore_environ

if TYPE_CHECKING:
    from collections.abc import Iterator

    from distributed import Client

    from dparallel.cluster.spec import ClusterSpec

__all__ = [
    "ENV_TORCH_THREADS",
    "TorchThreadsPlugin",
    "configured_torch_threads",
    "ensure_torch_threads",
    "plugin_registered",
    "register_threads",
    "torch_thread_report",
    "torch_threads",
    "worker_env",
]

logger = logging.getLogger(__name__)

#: Environment variable holding the per-task torch thread budget.
ENV_TORCH_THREADS = "DPARALLEL_TORCH_THREADS"


def configured_torch_threads(default: int = 1) -> int:
    """The torch thread budget of this process (``$DPARALLEL_TORCH_THREADS`` or ``default``)."""
    raw = os.environ.get(ENV_TORCH_THREADS, "")
    try:
        value = int(raw)
    except ValueError:
        if raw:
            logger.warning("ignoring %s=%r: not an integer", ENV_TORCH_THREADS, raw)
        return default
    return value if value >= 1 else default


def ensure_torch_threads(n: int | None = None) -> int:
    """Set ``torch.set_num_threads(n)`` for the calling thread if it differs (``None``:
    :func:`configured_torch_threads`); returns the budget."""
    import torch

    n = configured_torch_threads() if n is None else int(n)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def torch_thread_report(_: Any = None) -> dict[str, Any]:
    """Diagnostic task (``client.submit(torch_thread_report, pure=False)``): torch threads
    of this OS thread ``before`` and ``after`` the ``budget``, ``omp_num_threads`` (env),
    ``pid`` and ``thread``."""
    import threading

    import torch

    before = torch.get_num_threads()
    budget = ensure_torch_threads()
    return {
        "before": before,
        "budget": budget,
        "after": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "pid": os.getpid(),
        "thread": threading.get_ident(),
    }


@contextmanager
def torch_threads(n: int | None = None) -> Iterator[int]:
    """Run a block with ``n`` torch threads in this OS thread, then restore the old value."""
    import torch

    previous = torch.get_num_threads()
    try:
        yield ensure_torch_threads(n)
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


#: What the plugin sets in a worker's environment, and a worker process starts with
#: (:func:`worker_env`).
_BUDGET_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", ENV_TORCH_THREADS)


class TorchThreadsPlugin(WorkerPlugin):
    """Worker plugin that records the torch thread budget in every worker process: in
    ``DPARALLEL_TORCH_THREADS`` and, for libraries initialised later, OMP/MKL_NUM_THREADS."""

    name = "dparallel-torch-threads"
    idempotent = True

    def __init__(self, n: int) -> None:
        if int(n) < 1:
            raise ValueError(f"torch thread budget must be >= 1, got {n}")
        self.n = int(n)

    def setup(self, worker: Any) -> None:
        """Record the budget in the worker's environment (what was there is kept)."""
        self._before = {var: os.environ.get(var) for var in _BUDGET_VARIABLES}
        for var in _BUDGET_VARIABLES:
            os.environ[var] = str(self.n)

    def teardown(self, worker: Any) -> None:
        """Give the worker its own budget back (the plugin removed: the run that set it
        ended, and others use the cluster)."""
        restore_environ(getattr(self, "_before", {}))


def worker_env(spec: ClusterSpec) -> dict[str, str]:
    """Environment for worker processes: the torch/OpenMP/MKL thread budget."""
    return dict.fromkeys(_BUDGET_VARIABLES, str(spec.torch_threads or 1))


def plugin_registered(client: Client, name: str) -> bool:
    """Whether ``client``'s scheduler holds a worker plugin ``name`` (registered earlier)."""
    return bool(client.run_on_scheduler(_scheduler_holds_plugin, name=name))


def _scheduler_holds_plugin(dask_scheduler: Any, name: str) -> bool:
    return name in dask_scheduler.worker_plugins


def register_threads(client: Client, spec: ClusterSpec) -> bool:
    """Register the torch-thread plugin on every worker when the spec sets a budget;
    whether it did."""
    if spec.torch_threads is None:
        return False
    client.register_plugin(TorchThreadsPlugin(spec.torch_threads))
    return True
