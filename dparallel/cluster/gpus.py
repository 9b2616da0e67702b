"""GPU workers: one Dask worker per GPU, found and routed to through Dask resources.

dask-cuda's convention without depending on it: each GPU worker sees one device through
its own ``CUDA_VISIBLE_DEVICES`` and advertises the resource ``GPU=1`` (:data:`GPU_RESOURCE`):
a local cluster's with ``gpus=N``, any other's started with ``dask worker --resources
GPU=1`` (docs/workflows.md). Inside a task, :func:`worker_gpus` says whether it has one.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

from dparallel.errors import ClusterError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "GPU_RESOURCE",
    "add_gpu_workers",
    "check_gpus",
    "gpu_partitions",
    "gpu_worker_addresses",
    "start_specified_workers",
    "visible_gpus",
    "worker_gpus",
]

#: The Dask resource a GPU worker advertises (one per worker).
GPU_RESOURCE = "GPU"


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use: ``CUDA_VISIBLE_DEVICES`` when set (empty:
    none), else those ``nvidia-smi -L`` lists, else none (without torch: the driver stays
    light)."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [d.strip() for d in given.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    lines = [line for line in out.stdout.splitlines() if line.startswith("GPU ")]
    return [str(i) for i in range(len(lines))]


def check_gpus(n: int) -> list[str]:
    """The first ``n`` visible devices; :class:`ClusterError` when fewer are visible."""
    devices = visible_gpus()
    if n > len(devices):
        where = os.environ.get("CUDA_VISIBLE_DEVICES")
        seen = f"CUDA_VISIBLE_DEVICES={where!r}" if where is not None else "nvidia-smi -L"
        fix = f"give --gpus {len(devices)} or fewer" if devices else "no GPU is visible here"
        raise ClusterError(
            f"--gpus {n} (cluster.gpus) asks for {n} GPU workers but {len(devices)} GPU(s) "
            f"are visible ({seen}): {fix} (CPU workers need no option)"
        )
    return devices[:n]


#: Seconds :func:`start_specified_workers` waits for the workers it starts.
WORKER_START_TIMEOUT = 120.0


def add_gpu_workers(cluster: Any, devices: list[str], *, wait: bool = True) -> None:
    """Add one worker per device to a running ``LocalCluster`` (or any SpecCluster): the
    cluster's own worker options plus ``CUDA_VISIBLE_DEVICES`` and the ``GPU=1`` resource,
    named ``gpu-<device>``. ``wait``: start them now and wait for them (else only added to
    the cluster's spec, for whoever corrects its state next)."""
    base = cluster.new_spec
    for device in devices:
        options = dict(base.get("options", {}))
        options["env"] = {**(options.get("env") or {}), "CUDA_VISIBLE_DEVICES": device}
        options["resources"] = {**(options.get("resources") or {}), GPU_RESOURCE: 1}
        options["name"] = f"gpu-{device}"
        cluster.worker_spec[f"gpu-{device}"] = {"cls": base["cls"], "options": options}
    if wait and devices:
        start_specified_workers(cluster)


def start_specified_workers(cluster: Any, timeout: float = WORKER_START_TIMEOUT) -> None:
    """Start the workers of ``cluster``'s spec that do not run yet (``scale`` to the spec's
    size) and wait until all run; distributed's ``TimeoutError`` when not within ``timeout``
    s (distributed logs why a worker failed to start)."""
    n = len(cluster.worker_spec)
    cluster.scale(n)
    cluster.wait_for_workers(n, timeout=timeout)


def gpu_worker_addresses(client: Any) -> list[str]:
    """Addresses of the client's workers that advertise a :data:`GPU_RESOURCE`."""
    workers = client.scheduler_info(n_workers=-1).get("workers", {})
    return sorted(
        address
        for address, info in workers.items()
        if (info.get("resources") or {}).get(GPU_RESOURCE, 0) > 0
    )


def worker_gpus() -> float:
    """The :data:`GPU_RESOURCE` of the Dask worker running the caller (0 outside one)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return 0.0
    return float((worker.state.total_resources or {}).get(GPU_RESOURCE, 0))


def gpu_partitions(
    partitions: Sequence[int], n_gpu: int, n_cpu: int, share: float | None = None
) -> set[int]:
    """Which of ``partitions`` to mark for GPU workers (``resources={"GPU": 1}``).

    A ``share`` of them (default ``n_gpu / (n_gpu + n_cpu)``: a GPU worker counts as one
    worker), spread evenly over the list. Unmarked ones run on any worker, GPU workers
    included (:func:`worker_gpus` tells the task where it runs).
    """
    if n_gpu <= 0 or not partitions:
        return set()
    f = share if share is not None else n_gpu / (n_gpu + max(n_cpu, 0))
    f = min(max(f, 0.0), 1.0)
    return {p for i, p in enumerate(partitions) if math.floor((i + 1) * f) > math.floor(i * f)}
