"""Featurize on the whole node: ``--local N`` for N = 1 … all cores against the ceiling.

One run, one machine, water (n2p2's RPBE-D3 example, ``../shared/n2p2/water``) concatenated
``--copies`` times:

* ``dparallel featurize --local N -q`` as a user runs it (whole command, a fresh store each
  time), for N = 1, 2, 4, … and the core count; its fixed cost is the wall time minus
  the busiest worker's task seconds (from the store's reports), split into the time to
  the first task's start and the time after the last task's end;
* the independent-process ceiling: N plain processes, each featurizing its share of the
  structures in-process (reading, neighbor list, the numba kernel; no Dask, no store),
  timed from a common start after their imports and warm-up;
* ``--gpus 1`` with one CPU worker and with all cores' CPU workers, when a GPU is visible
  (the table says "no GPU" otherwise).

Values, and with ``--derivatives`` dG/dr too. Prints one table: seconds, atoms/s, speed-up
over one worker (one process for the ceiling) and share of the ceiling at the same N.
Usage::

    PYTHONPATH=. python benchmarks/bench_node_scaling.py [--copies 100] [--derivatives]
        [--max-workers N] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpu_results import record
from water_example import WATER

ROOT = Path(__file__).resolve().parents[1]


def stage(root: Path, copies: int) -> tuple[Path, Path, int]:
    """input.data (water × copies) and d.yaml in ``root``; returns them and the atom count."""
    one = (WATER / "input.data").read_text()
    data = root / "input.data"
    data.write_text(one * copies)
    nn = "\n".join(
        line
        for line in (WATER / "input.nn").read_text().splitlines()
        if line.split()[:1] != ["use_short_forces"]
    )
    (root / "input.nn").write_text(nn + "\n")
    (root / "d.yaml").write_text(f"acsf:\n  n2p2: {root / 'input.nn'}\n")
    atoms = sum(
        1 for line in one.splitlines() if line.split()[:1] == ["atom"]
    ) * copies  # fmt: skip
    return data, root / "d.yaml", atoms


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    return env


def run_cli(
    data: Path,
    yaml: Path,
    workers: int,
    gpus: int,
    derivatives: bool,
    keep: str = "",
    partition_atoms: int | None = None,
) -> tuple[float, float, float, float, dict[str, float]]:
    """One ``dparallel featurize``: wall seconds, its busiest worker's task seconds,
    seconds from the command's start to its first task's start and from its last task's
    end to the command's end (the tasks' ``started`` and ``seconds``), and the tasks'
    seconds summed per phase and device (``read``, ``compute``, ``write``, e.g.
    ``cuda compute``). The store is removed afterwards unless ``keep`` names it
    (``store-<keep>.zarr`` beside the data)."""
    store = data.parent / (f"store-{keep}.zarr" if keep else "store.zarr")
    shutil.rmtree(store, ignore_errors=True)
    cmd = [sys.executable, "-m", "dparallel", "featurize", str(data), "--format", "n2p2"]
    cmd += ["--descriptors", str(yaml), "--local", str(workers), "-q", "-o", str(store)]
    cmd += ["--dashboard-address", ":0"] + (["--derivatives"] if derivatives else [])
    cmd += ["--gpus", str(gpus)] if gpus else []
    cmd += ["--partition-atoms", str(partition_atoms)] if partition_atoms else []
    t0, e0 = time.perf_counter(), time.time()
    out = subprocess.run(cmd, env=_env(), cwd=data.parent, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    code = (
        "import json, sys\nfrom dparallel.store import open_store\ns = open_store(sys.argv[1])\n"
        "print(json.dumps([s.report(p) for p in range(s.n_partitions)]))"
    )
    got = subprocess.run(
        [sys.executable, "-c", code, str(store)], env=_env(), capture_output=True, text=True
    )
    busy: dict[int, float] = {}
    phases: dict[str, float] = {}
    reports = json.loads(got.stdout.strip().splitlines()[-1])
    for r in reports:
        busy[r["pid"]] = busy.get(r["pid"], 0.0) + r["seconds"]
        for phase in ("read", "compute", "write"):
            key = f"{r.get('device', 'cpu')} {phase}"
            phases[key] = phases.get(key, 0.0) + r.get(f"seconds_{phase}", 0.0)
    if not keep:
        shutil.rmtree(store, ignore_errors=True)
    first = min(r["started"] for r in reports) - e0
    last = max(r["started"] + r["seconds"] for r in reports) - e0
    return wall, max(busy.values()), first, wall - last, phases


def _share(args: tuple[str, str, int, int, bool, object]) -> tuple[float, float]:
    """One ceiling process: warm up, wait for the others, featurize its share in-process."""
    data, yaml, i, n, derivatives, barrier = args
    from dataclasses import replace

    from dparallel.io import open_source
    from dparallel.workflow.descriptors_spec import load_descriptors
    from dparallel.workflow.featurize_task import task_descriptors

    dset = load_descriptors(yaml)
    if derivatives:
        dset = replace(dset, derivatives=True)
    source = open_source(data, "n2p2")
    total = len(source)
    start, stop = total * i // n, total * (i + 1) // n
    task_descriptors(source.read(0, 1), dset)  # imports and compiled kernels loaded
    barrier.wait()  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    task_descriptors(source.read(start, stop), dset)
    return t0, time.perf_counter()


def ceiling(data: Path, yaml: Path, n: int, derivatives: bool) -> float:
    """Wall seconds of ``n`` independent processes featurizing their shares at once."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(n)
        with ctx.Pool(n) as pool:
            jobs = [(str(data), str(yaml), i, n, derivatives, barrier) for i in range(n)]
            spans = pool.map(_share, jobs)
    return max(t1 for _, t1 in spans) - min(t0 for t0, _ in spans)


def gpu_present() -> bool:
    """Whether a GPU is visible (without importing torch here)."""
    sys.path.insert(0, str(ROOT))
    from dparallel.cluster.gpus import visible_gpus

    return bool(visible_gpus())


def cpu_partition_atoms(data: Path, workers: int) -> int:
    """The partition size ``--local workers`` derives (a GPU worker is one worker more,
    which would derive another plan: the ``--gpus`` runs are given this one, so that their
    stores compare array by array)."""
    code = (
        "import sys\nfrom dparallel.io import open_source\n"
        "from dparallel.store.plan import derived_partition_atoms\n"
        "print(derived_partition_atoms(open_source(sys.argv[1], 'n2p2').atom_counts, "
        "int(sys.argv[2])))"
    )
    got = subprocess.run(
        [sys.executable, "-c", code, str(data), str(workers)],
        env=_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(got.stdout.strip().splitlines()[-1])


def compare_stores(a: Path, b: Path) -> dict[str, object]:
    """Whether every array of store ``b`` equals store ``a``'s bit for bit, and the largest
    relative difference of the float arrays (in a child: torch stays out of this process)."""
    code = (
        "import json, sys\nimport numpy as np, zarr\n"
        "a, b = (zarr.open_group(p, mode='r') for p in sys.argv[1:3])\n"
        "equal, worst, n = True, 0.0, 0\n"
        "for k, x in a.members(max_depth=None):\n"
        "    if not isinstance(x, zarr.Array): continue\n"
        "    x, y = x[...], b[k][...]\n"
        "    n += 1\n"
        "    if x.shape != y.shape: equal = False; worst = float('inf'); continue\n"
        "    equal = equal and bool(np.array_equal(x, y))\n"
        "    if x.dtype.kind == 'f' and x.size:\n"
        "        s = float(np.max(np.abs(x)))\n"
        "        d = float(np.max(np.abs(x - y)))\n"
        "        worst = max(worst, d / s if s else d)\n"
        "print(json.dumps({'arrays': n, 'bitwise_equal': equal, 'max_rel': worst}))"
    )
    got = subprocess.run(
        [sys.executable, "-c", code, str(a), str(b)], env=_env(), capture_output=True, text=True
    )
    if got.returncode != 0:
        return {"error": got.stderr.strip().splitlines()[-1:]}
    return json.loads(got.stdout.strip().splitlines()[-1])


def worker_counts(max_workers: int) -> list[int]:
    """1, 2, 4, … up to ``max_workers``, and ``max_workers`` itself."""
    counts, n = [], 1
    while n < max_workers:
        counts.append(n)
        n *= 2
    return [*counts, max_workers]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=100, help="water example copies (100)")
    parser.add_argument("--derivatives", action="store_true", help="also dG/dr")
    parser.add_argument("--max-workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=1, help="best of this many runs each")
    parser.add_argument("--counts", default="", help="worker counts, e.g. 1,16 (default 1,2,4…)")
    args = parser.parse_args()
    if not (WATER / "input.data").is_file():
        print(f"SKIPPED: {WATER} is missing")
        return 0
    root = Path(tempfile.mkdtemp(prefix="bench-node-"))
    try:
        data, yaml, atoms = stage(root, args.copies)
        what = "values + dG/dr" if args.derivatives else "values"
        print(f"water x{args.copies}: {atoms} atoms, {what}, {os.cpu_count()} cores")
        counts = (
            [int(c) for c in args.counts.split(",")]
            if args.counts
            else worker_counts(args.max_workers)
        )
        gpu = gpu_present()  # once: it asks nvidia-smi
        rows: list[tuple[str, int, float, float, float, float, dict]] = []  # name, N, s, …
        ceilings: dict[int, float] = {}
        for n in counts:
            ceilings[n] = min(ceiling(data, yaml, n, args.derivatives) for _ in range(args.rounds))
            keep = "cpu" if n == counts[-1] else ""
            runs = [run_cli(data, yaml, n, 0, args.derivatives, keep) for _ in range(args.rounds)]
            wall, busiest, first, tail, phases = min(runs, key=lambda r: r[0])
            rows.append((f"--local {n}", n, wall, wall - busiest, first, tail, phases))
            print(f"  --local {n}: {wall:.2f} s; ceiling {ceilings[n]:.2f} s", flush=True)
        agreement = None
        if gpu:
            top = counts[-1]
            size = cpu_partition_atoms(data, top)  # the --local top run's partitions
            for n in sorted({1, top}):
                wall, busiest, first, tail, phases = min(
                    (
                        run_cli(data, yaml, n, 1, args.derivatives, "gpu", size)
                        for _ in range(args.rounds)
                    ),
                    key=lambda r: r[0],
                )
                rows.append((f"--local {n} --gpus 1", n, wall, wall - busiest, first, tail, phases))
            agreement = compare_stores(root / "store-cpu.zarr", root / "store-gpu.zarr")
            print(f"--gpus 1 store against --local {top}'s: {agreement}")
        one, ceil_one = rows[0][2], ceilings[counts[0]]
        figures: list[dict[str, object]] = []
        print(
            f"\n{'run':<24}{'s':>8}{'atoms/s':>11}{'x 1 wkr':>9}{'fixed s':>9}"
            f"{'1st task':>9}{'after':>7}{'ceiling s':>11}{'ceil x1':>9}{'% ceil':>8}"
        )
        for name, n, wall, fixed, first, tail, phases in rows:
            ceil = ceilings.get(n)
            cells = f"{ceil:>11.2f}{ceil_one / ceil:>9.2f}{ceil / wall:>8.0%}" if ceil else ""
            figures.append({
                "run": name, "workers": n, "seconds": wall, "atoms_per_s": atoms / wall,
                "fixed_s": fixed, "first_task_s": first, "after_s": tail,
                "ceiling_s": ceil, "share_of_ceiling": ceil / wall if ceil else None,
                "task_seconds": phases,
            })  # fmt: skip
            print(
                f"{name:<24}{wall:>8.2f}{atoms / wall:>11.0f}{one / wall:>9.2f}"
                f"{fixed:>9.2f}{first:>9.2f}{tail:>7.2f}{cells}"
            )
        print(
            "fixed s: wall - busiest worker's task seconds; 1st task: command start to the "
            "first task's start; after: last task's end to the command's end"
        )
        print("task seconds summed over partitions, by device and phase:")
        for name, *_, phases in rows:
            print(f"  {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(phases.items())))
        if not gpu:
            print("--gpus 1: no GPU")
        key = f"featurize_water_x{args.copies}" + ("_dgdr" if args.derivatives else "")
        record(key, {"atoms": atoms, "rows": figures, "gpu_store_vs_cpu": agreement})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
