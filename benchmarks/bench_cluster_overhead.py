"""Per-task cost of dparallel's cluster helpers on a 2-worker LocalCluster.

Measures, in one run, the wall time per task for tiny tasks that do nothing, that apply the
torch thread budget (``ensure_torch_threads``) and that publish a dashboard progress event
(``publish_progress``), plus cluster start-up and shutdown. Ratios are against the empty
task measured in the same run. With ``--featurize FILE --descriptors YAML`` it instead
times the phases of one featurize run as ``dparallel featurize … --local N`` does them
(driver imports, indexing and store creation, cluster start, tasks, shutdown, statistics)
and lists each task's read / kernel / write seconds: the fixed cost is the wall time
minus the kernel time of the busiest worker. Usage::

    PYTHONPATH=. python benchmarks/bench_cluster_overhead.py [--tasks 2000] [--workers 2]
    PYTHONPATH=. python benchmarks/bench_cluster_overhead.py --featurize input.data \
        --format n2p2 --descriptors d.yaml [--workers 2] [--partition-atoms N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from dparallel.cluster import ClusterSpec, connect, ensure_torch_threads
from dparallel.cluster.worker_exit import FAST_EXIT_PRELOAD
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


def featurize_phases(args: argparse.Namespace) -> None:
    """Print the phases of one featurize run and each task's read/kernel/write seconds."""
    t_start = time.perf_counter()
    marks: list[tuple[str, float]] = []
    from dparallel.cluster.forkserver import start_forkserver
    from dparallel.workflow.featurize_worker_preload import (
        FEATURIZE_FORKSERVER_PRELOAD,
        FEATURIZE_WORKER_PRELOAD,
        featurize_preloads,
    )

    warm = () if args.no_warm_up else (FEATURIZE_FORKSERVER_PRELOAD,)
    start_forkserver(warm)  # as `dparallel featurize` does first (DPARALLEL_WARM_WORKERS=0: off)
    from dparallel.store import StoreLease
    from dparallel.workflow.descriptors_spec import load_descriptors
    from dparallel.workflow.featurize import (
        FeaturizeOptions,
        featurize_partition,
        finish_featurize,
        prepare_featurize,
    )

    marks.append(("driver imports", time.perf_counter()))
    dset = load_descriptors(args.descriptors, data_units=args.units)
    if args.derivatives:
        from dataclasses import replace

        dset = replace(dset, derivatives=True)
    out = Path(tempfile.mkdtemp()) / "store.zarr"
    try:
        with StoreLease(out, command="bench"):
            source, store = prepare_featurize(
                args.featurize,
                out,
                dset,
                FeaturizeOptions(
                    format=args.format, units=args.units, partition_atoms=args.partition_atoms
                ),
                n_workers=args.workers,
            )
            marks.append(
                (f"index + create store ({store.n_partitions} part.)", time.perf_counter())
            )
            spec = ClusterSpec(n_workers=args.workers, dashboard_address="127.0.0.1:0")
            preload = featurize_preloads()
            if args.no_warm_up:
                preload = tuple(m for m in preload if m != FEATURIZE_WORKER_PRELOAD)
            if args.slow_exit:
                preload = tuple(m for m in preload if m != FAST_EXIT_PRELOAD)
            with connect(spec, worker_preload=preload, forkserver_preload=warm) as h:
                h.client.wait_for_workers(args.workers, timeout=120)
                marks.append(("cluster start", time.perf_counter()))
                pending = store.pending_partitions().tolist()
                futures = [
                    h.client.submit(
                        featurize_partition, source, os.fspath(store.path), p, dset.to_dict(),
                        pure=False,
                    )
                    for p in pending
                ]  # fmt: skip
                reports = h.client.gather(futures)
                marks.append(("tasks", time.perf_counter()))
            marks.append(("cluster shutdown", time.perf_counter()))
            finish_featurize(store.path)
            marks.append(("merge statistics", time.perf_counter()))
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    wall = marks[-1][1] - t_start
    by_worker: dict[int, float] = {}
    for r in reports:
        by_worker[r["pid"]] = by_worker.get(r["pid"], 0.0) + r["seconds_compute"]
    kernel = max(by_worker.values())
    print(f"featurize {args.featurize}: {sum(r['n_atoms'] for r in reports)} atoms, "
          f"{args.workers} workers")  # fmt: skip
    prev = t_start
    for name, t in marks:
        print(f"{name:<40}{t - prev:>8.2f} s")
        prev = t
    print(f"{'total wall':<40}{wall:>8.2f} s")
    print(f"{'kernel, busiest worker':<40}{kernel:>8.2f} s")
    print(f"{'fixed cost (wall - kernel)':<40}{wall - kernel:>8.2f} s")
    print(
        f"{'task':>4} {'pid':>7} {'atoms':>6} {'read s':>7} {'kernel s':>9} {'write s':>8} "
        f"{'write/kernel':>13}"
    )
    for r in sorted(reports, key=lambda r: r["partition"]):
        print(
            f"{r['partition']:>4} {r['pid']:>7} {r['n_atoms']:>6} {r['seconds_read']:>7.2f} "
            f"{r['seconds_compute']:>9.2f} {r['seconds_write']:>8.2f} "
            f"{r['seconds_write'] / r['seconds_compute']:>12.0%}"
        )
    write = sum(r["seconds_write"] for r in reports)
    compute = sum(r["seconds_compute"] for r in reports)
    print(
        f"{'all':>4} {'':>7} {'':>6} {'':>7} {compute:>9.2f} {write:>8.2f} {write / compute:>12.0%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--featurize", metavar="FILE", help="time one featurize run of FILE")
    parser.add_argument("--descriptors", metavar="YAML", help="descriptors (with --featurize)")
    parser.add_argument("--format", default=None)
    parser.add_argument("--units", default="ase")
    parser.add_argument("--derivatives", action="store_true")
    parser.add_argument("--partition-atoms", type=int, default=None)
    parser.add_argument(
        "--slow-exit", action="store_true", help="workers without the fast-exit preload"
    )
    parser.add_argument(
        "--no-warm-up", action="store_true", help="workers without the featurize warm-up preload"
    )
    args = parser.parse_args()
    if args.featurize:
        featurize_phases(args)
        return

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
