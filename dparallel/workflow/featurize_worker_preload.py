"""The Dask worker preload of featurize: it warms a worker up while the cluster starts.

A worker's first task pays for its imports (numba, zarr, the task module) and for numba
loading the compiled kernels from its cache (docs/deploy.md). As a worker preload
(:data:`FEATURIZE_WORKER_PRELOAD`), each worker does that in a background thread from its
start; a task that arrives sooner waits on the same import and compile locks, and a failed
warm-up is logged and ignored (the task redoes the work and reports any error).
:func:`warm_up` is also what the forkserver runs (:data:`FEATURIZE_FORKSERVER_PRELOAD`).

vesin is imported synchronously, before the worker accepts tasks: its import briefly
hides torch (:mod:`dparallel.neighbors`), which must not race a task importing torch.
A GPU worker (Dask resource ``GPU``) also runs the device engine once in that thread
(torch, the CUDA context, Triton's kernels), which its first task otherwise pays for.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = [
    "FEATURIZE_FORKSERVER_PRELOAD",
    "FEATURIZE_WORKER_PRELOAD",
    "dask_setup",
    "featurize_connect_options",
    "featurize_preloads",
    "warm_up",
    "warm_up_device",
    "warm_up_logged",
]

#: Module name to pass as a Dask worker preload.
FEATURIZE_WORKER_PRELOAD = "dparallel.workflow.featurize_worker_preload"
#: Module for the forkserver of local workers (:mod:`dparallel.cluster.forkserver`) to
#: import: importing it runs :func:`warm_up_logged` once, before the workers are forked.
FEATURIZE_FORKSERVER_PRELOAD = "dparallel.workflow.featurize_forkserver_preload"

log = logging.getLogger(__name__)


def featurize_preloads() -> tuple[str, ...]:
    """Worker preloads of the local clusters featurize starts: warm-up and fast exit."""
    from dparallel.cluster.worker_exit import FAST_EXIT_PRELOAD

    return (FEATURIZE_WORKER_PRELOAD, FAST_EXIT_PRELOAD)


def featurize_connect_options() -> dict[str, Any]:
    """What featurize asks of :func:`dparallel.cluster.connect`: the preloads of the local
    clusters it starts, and a handle as soon as the cluster is up."""
    return {
        "worker_preload": featurize_preloads(),
        "forkserver_preload": (FEATURIZE_FORKSERVER_PRELOAD,),
        "return_early": True,
    }


def warm_up(device: str = "cpu") -> None:
    """Import what a featurize task uses and run its compiled code once on a water molecule:
    the ACSF kernel (float64, with derivatives: the default featurization, dG/dr in the
    store's split layout, as tasks compute it) and the store's packing of the blocks; on a
    GPU worker (``device`` "cuda") then its device engine too, so that torch, the device's
    context and the engine's kernels are loaded before its first task."""
    import numpy as np

    from dparallel.descriptors.acsf import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.descriptors.registry import kind_of
    from dparallel.store._derivatives import encode_pairs
    from dparallel.types import StructureBatch
    from dparallel.workflow.featurize_task import task_descriptors  # and its imports

    acsf = ACSF.uniform(
        ["H", "O"],
        r_cut=3.0,
        cutoff="cos",
        radial=[(0.5, 0.0)],
        narrow=[(0.05, 1.0, -1.0, 0.0)],
        wide=[(0.05, 1.0, 1.0, 0.0)],
    )
    water = StructureBatch(
        numbers=np.array([8, 1, 1]),
        positions=np.array([[0.0, 0.0, 0.0], [0.9572, 0.0, 0.0], [-0.24, 0.9266, 0.0]]),
        cells=np.zeros((1, 3, 3)),
        pbc=np.zeros((1, 3), dtype=bool),
        energy=np.zeros(1),
        forces=np.zeros((3, 3)),
        offsets=np.array([0, 3]),
    )
    dset = DescriptorSet(acsf=acsf, derivatives=True)
    computed = task_descriptors(water, dset)
    for arrays in computed[kind_of(acsf).name].values():  # the store's packing of dG/dr blocks
        encode_pairs({k.split("/", 2)[2]: v for k, v in arrays.items() if k.startswith("d/H/")})
    if device != "cpu":  # never in the forkserver: a forked child cannot use a CUDA context
        task_descriptors(water, dset, device=device)


def warm_up_logged(device: str = "cpu") -> None:
    """:func:`warm_up`; a failure is logged and ignored (the task then does the work)."""
    try:
        warm_up(device)
    except Exception:  # an optimisation only: the task redoes the work and reports errors
        log.warning("featurize warm-up failed; the first task does it instead", exc_info=True)


def dask_setup(worker: Any) -> None:
    """Dask preload hook: logs and warnings to the run's log file (a worker the CLI
    started), import vesin now, then warm up in a background thread."""
    from dparallel.cluster.logs import route_process_to_log_file
    from dparallel.neighbors._vesin import import_vesin

    route_process_to_log_file()
    import_vesin()
    threading.Thread(
        target=warm_up_logged, args=(warm_up_device(worker),), name="dparallel-warm-up",
        daemon=True,
    ).start()  # fmt: skip


def warm_up_device(worker: Any) -> str:
    """``"cuda"`` for a worker holding the GPU resource (where featurize computes on the
    device, :func:`dparallel.workflow.featurize_task.task_device`), else ``"cpu"``."""
    from dparallel.cluster.gpus import GPU_RESOURCE

    resources = getattr(getattr(worker, "state", None), "total_resources", None) or {}
    return "cuda" if float(resources.get(GPU_RESOURCE, 0)) > 0 else "cpu"
