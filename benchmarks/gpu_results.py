"""Where the GPU benchmarks write their figures: ``benchmarks/results/gpu-YYYY-MM-DD.json``.

Each benchmark calls :func:`record` with its section name and figures; the file holds one
key per section plus ``machine`` (host cores, GPU, driver, torch, CUDA, triton and numba
versions), merged on every call so that the benchmarks of one run share one file.
``DPARALLEL_GPU_RESULTS`` names another file (the device run points it at its output
folder). Nothing is written without a CUDA device unless that variable is set, so CPU-only
runs of these benchmarks leave the results folder alone.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def results_path() -> Path | None:
    """The file to merge into, or None (no CUDA device and no variable)."""
    named = os.environ.get("DPARALLEL_GPU_RESULTS")
    if named:
        return Path(named)
    import torch

    if not torch.cuda.is_available():
        return None
    return RESULTS / f"gpu-{datetime.datetime.now(datetime.UTC):%Y-%m-%d}.json"


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def machine() -> dict[str, Any]:
    """The host, the GPU and the software the figures were measured with."""
    import torch

    gpu = torch.cuda.is_available()
    props = torch.cuda.get_device_properties(0) if gpu else None
    return {
        "host_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name(0) if gpu else None,
        "gpu_memory_bytes": props.total_memory if props else None,
        "driver": _driver() if gpu else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": _version("triton"),
        "numba": _version("numba"),
    }


def record(section: str, figures: dict[str, Any]) -> Path | None:
    """Merge ``figures`` as ``section`` into the results file; its path, or None.

    A section already there (an earlier step's run of the same benchmark and size, e.g. a
    profiled one) is kept: the new one is ``section_run2``, ``section_run3``, …
    """
    path = results_path()
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault("machine", machine())
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    section = _unused(data, section)
    data[section] = {"measured": stamp, **figures}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=float) + "\n")
    tmp.replace(path)
    print(f"figures: {path} [{section}]")
    return path


def _unused(data: dict[str, Any], section: str) -> str:
    """``section``, or ``section_runN`` with the first N ≥ 2 not in ``data``."""
    name, n = section, 1
    while name in data:
        n += 1
        name = f"{section}_run{n}"
    return name
