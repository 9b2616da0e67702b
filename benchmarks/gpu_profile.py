"""Where a benchmarked run's time goes: ``torch.profiler`` tables for the GPU benchmarks.

:func:`profiled` runs a callable once under the profiler (CPU, and CUDA where the device
is one) and returns the operations and kernels with the most own time: on a CUDA run by
device time, else by CPU time (:func:`table` reads a profiler started and stopped by
hand). :func:`print_rows` prints them. Used by
``bench_node.py --profile`` and ``bench_gpu_train.py --profile``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


def self_device_us(event: Any) -> float:
    """An averaged profiler event's own device time, µs (torch renamed cuda → device)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0


def profiled(run: Callable[[], Any], cuda: bool, top: int = 25) -> tuple[list[dict], float]:
    """``run()`` once under the profiler: its ``top`` rows (name, count, own CPU and device
    ms) and the device milliseconds of all kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        run()
        if cuda:
            torch.cuda.synchronize()
    return table(prof, cuda, top)


def table(prof: Any, cuda: bool, top: int = 25) -> tuple[list[dict], float]:
    """A finished profiler's ``top`` rows and its kernels' device milliseconds, summed over
    the kernels' own rows (an operation's row repeats its kernels' time)."""
    events = list(prof.key_averages())
    key = self_device_us if cuda else (lambda e: float(e.self_cpu_time_total))
    events.sort(key=key, reverse=True)
    rows = [
        {
            "name": e.key[:120],
            "count": int(e.count),
            "self_cpu_ms": e.self_cpu_time_total / 1e3,
            "self_device_ms": self_device_us(e) / 1e3,
        }
        for e in events[:top]
    ]
    return rows, sum(self_device_us(e) for e in events if _is_kernel(e)) / 1e3


def _is_kernel(event: Any) -> bool:
    """A device kernel's row (an operation's row also carries its kernels' device time)."""
    return str(getattr(event, "device_type", "")).rsplit(".", 1)[-1] not in ("CPU", "")


def print_rows(rows: list[dict]) -> None:
    """The rows of :func:`profiled` as a table."""
    print(f"{'operation':60s} {'count':>7s} {'self CPU ms':>12s} {'self dev ms':>12s}")
    for r in rows:
        print(f"{r['name'][:60]:60s} {r['count']:7d} {r['self_cpu_ms']:12.2f} "
              f"{r['self_device_ms']:12.2f}")  # fmt: skip
