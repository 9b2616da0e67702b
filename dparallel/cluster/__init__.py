"""Connect to or start the Dask cluster dparallel runs on; torch thread budget in tasks.

Only ``dparallel.cluster``, ``dparallel.dashboard`` and ``dparallel.workflow`` import
``distributed``.
"""

from dparallel.cluster.allocator import tune_allocator
from dparallel.cluster.connect import (
    ClusterHandle,
    connect,
    dashboard_link,
    dashboard_pages,
    expected_workers,
    security_from_tls,
)
from dparallel.cluster.spec import ClusterSpec, SlurmSpec, TLSSpec
from dparallel.cluster.threads import (
    ENV_TORCH_THREADS,
    TorchThreadsPlugin,
    configured_torch_threads,
    ensure_torch_threads,
    torch_thread_report,
    torch_threads,
)

__all__ = [
    "ENV_TORCH_THREADS",
    "ClusterHandle",
    "ClusterSpec",
    "SlurmSpec",
    "TLSSpec",
    "TorchThreadsPlugin",
    "configured_torch_threads",
    "connect",
    "dashboard_link",
    "dashboard_pages",
    "ensure_torch_threads",
    "expected_workers",
    "security_from_tls",
    "torch_thread_report",
    "torch_threads",
    "tune_allocator",
]
