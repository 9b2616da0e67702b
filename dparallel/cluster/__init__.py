"""Connect to or start the Dask cluster dparallel runs on; torch thread budget in tasks.

Only ``dparallel.cluster``, ``dparallel.dashboard`` and ``dparallel.workflow`` import
``distributed``. The names below load on first use (PEP 562): importing
``dparallel.cluster.forkserver`` at the top of a command must not wait for
``distributed``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dparallel._lazy import lazy_getattr
from dparallel.cluster.allocator import tune_allocator

if TYPE_CHECKING:
    from dparallel.cluster.connection import connect, connect_in_background, discard_connection
    from dparallel.cluster.expected import expected_worker_memory, expected_workers
    from dparallel.cluster.handle import ClusterHandle, dashboard_link, dashboard_pages
    from dparallel.cluster.spec import ClusterSpec, SlurmSpec, TLSSpec
    from dparallel.cluster.threads import (
        ENV_TORCH_THREADS,
        TorchThreadsPlugin,
        configured_torch_threads,
        ensure_torch_threads,
        torch_thread_report,
        torch_threads,
    )

_LAZY = {
    "ClusterHandle": "handle",
    "connect": "connection",
    "connect_in_background": "connection",
    "discard_connection": "connection",
    "dashboard_link": "handle",
    "dashboard_pages": "handle",
    "expected_worker_memory": "expected",
    "expected_workers": "expected",
    "ClusterSpec": "spec",
    "SlurmSpec": "spec",
    "TLSSpec": "spec",
    "ENV_TORCH_THREADS": "threads",
    "TorchThreadsPlugin": "threads",
    "configured_torch_threads": "threads",
    "ensure_torch_threads": "threads",
    "torch_thread_report": "threads",
    "torch_threads": "threads",
}

__all__ = [
    "ENV_TORCH_THREADS",
    "ClusterHandle",
    "ClusterSpec",
    "SlurmSpec",
    "TLSSpec",
    "TorchThreadsPlugin",
    "configured_torch_threads",
    "connect",
    "connect_in_background",
    "dashboard_link",
    "dashboard_pages",
    "discard_connection",
    "ensure_torch_threads",
    "expected_worker_memory",
    "expected_workers",
    "torch_thread_report",
    "torch_threads",
    "tune_allocator",
]

__getattr__ = lazy_getattr(__name__, _LAZY)
