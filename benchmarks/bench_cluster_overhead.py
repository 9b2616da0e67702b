"""Per-task cost of dparallel's cluster helpers on a 2-worker LocalCluster.

Measures, in one run, the wall time per task for tiny tasks that do nothing, that apply the
torch thread budget (``ensure_torch_threads``) and that publish a dashboard progress event
(``publish_progress``), plus cluster start-up and shutdown. Ratios are against the empty
task measured in the same run. Usage::

    PYTHONPATH=. python benchmarks/bench_cluster_overhead.py [--tasks 2000] [--workers 2]
"""

from __future__ import annotations

import argparse
import time

from dparallel.cluster import ClusterSpec, connect, ensure_torch_threads
from dparallel.dashboard.events import publish_progress


def _noop(i: int) -> int:
    return i


def _threads(i: int) -> int:
    ensure_torch_threads()
    return i


def _publish(i: int) -> int:
    publish_progress("bench", i, 1, 10, 0.0)
    return i


def _time_tasks(client, fn, n: int, repeats: int = 3) -> float:
    """Best-of-``repeats`` wall seconds per task for ``n`` tasks of ``fn``."""
    client.gather(client.map(fn, range(64), pure=False))  # warm-up (imports, first calls)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        client.gather(client.map(fn, range(n), pure=False))
        best = min(best, time.perf_counter() - t0)
    return best / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    t0 = time.perf_counter()
    handle = connect(ClusterSpec(n_workers=args.workers, dashboard_address="127.0.0.1:0"))
    handle.client.wait_for_workers(args.workers, timeout=60)
    startup = time.perf_counter() - t0
    try:
        rows = [
            ("empty task", _time_tasks(handle.client, _noop, args.tasks)),
            ("+ ensure_torch_threads", _time_tasks(handle.client, _threads, args.tasks)),
            ("+ publish_progress", _time_tasks(handle.client, _publish, args.tasks)),
        ]
    finally:
        t1 = time.perf_counter()
        handle.close()
        shutdown = time.perf_counter() - t1
    base = rows[0][1]
    print(f"LocalCluster: {args.workers} workers, {args.tasks} tasks per measurement (best of 3)")
    print(f"{'task':<26}{'ms/task':>10}{'ratio':>8}")
    for name, sec in rows:
        print(f"{name:<26}{sec * 1e3:>10.3f}{sec / base:>8.2f}")
    print(f"{'cluster start-up (s)':<26}{startup:>10.2f}")
    print(f"{'cluster shutdown (s)':<26}{shutdown:>10.2f}")


if __name__ == "__main__":
    main()
