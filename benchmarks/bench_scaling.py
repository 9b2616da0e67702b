"""Featurization throughput on Dask: 1 vs 2 workers, overhead vs in-process, worker peak RSS.

On the same data and descriptors (rattled, strained 32-atom fcc Cu cells, ACSF with
8 radial + 8 angular functions at 5 Å, values + per-pair derivatives), in interleaved
rounds (medians printed, with the spread):

* in-process kernels: the same kernels (read → neighbor list → ACSF → statistics) called
  partition by partition in this process, one torch thread, no Dask and no store;
* in-process + store: ``featurize_in_process`` (the very tasks and zarr writes, no Dask);
* ``featurize`` on a LocalCluster of 1 and 2 worker processes (1 thread each) into zarr;
* parallel efficiency = t(1 worker) / (2 · t(2 workers));
* Dask overhead = t(1 worker) / t(in-process + store) − 1: the same work with and without
  Dask; the cost of the store itself (in-process + store vs kernels) is printed beside it;
* worker peak RSS (max over workers, from getrusage) for the dataset and one 10× larger.

Every timed run starts from the same state: the previous run's store is deleted and its
dirty pages flushed (``os.sync``), so no run pays for another's writeback. Kernels are
warmed identically in-process and in the workers before timing.
``--no-malloc-tune`` keeps the Dask nanny's ``MALLOC_TRIM_THRESHOLD_`` in effect in the
workers (see ``dparallel.cluster.allocator``) to show what that setting costs.

    python benchmarks/bench_scaling.py [--structures 2000] [--repeats 3] [--no-derivatives]
        [--no-malloc-tune]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def make_dataset(path: Path, n: int, seed: int = 0) -> Path:
    """``n`` unlabelled 32-atom Cu cells (strained and rattled) as extxyz."""
    import ase.io
    from ase.build import bulk

    rng = np.random.default_rng(seed)
    base = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((2, 2, 2))
    frames = []
    for _ in range(n):
        atoms = base.copy()
        strain = np.eye(3) + rng.uniform(-0.03, 0.03, (3, 3))
        atoms.set_cell(atoms.cell[:] @ (0.5 * (strain + strain.T)), scale_atoms=True)
        atoms.positions += rng.normal(scale=0.1, size=atoms.positions.shape)
        frames.append(atoms)
    ase.io.write(path, frames, format="extxyz")
    return path


def repeat_file(src: Path, dst: Path, times: int) -> Path:
    """A file holding ``times`` copies of ``src`` back to back (valid extxyz)."""
    with open(dst, "wb") as out:
        for _ in range(times):
            with open(src, "rb") as handle:
                shutil.copyfileobj(handle, out)
    return dst


def descriptor_set(derivatives: bool):
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet

    radial = [(eta, 0.0) for eta in (0.01, 0.03, 0.06, 0.1, 0.2, 0.4, 0.7, 1.0)]
    angular = [(0.01, z, lam, 0.0) for z in (1.0, 2.0, 4.0, 8.0) for lam in (1.0, -1.0)]
    acsf = ACSF.uniform(["Cu"], r_cut=5.0, cutoff="cos", radial=radial, narrow=angular)
    return DescriptorSet(acsf=acsf, derivatives=derivatives)


def warm_up(descriptors) -> None:
    """Load every kernel once (numba's compiled-code cache, torch ops): not timed, anywhere."""
    from ase.build import bulk

    from dparallel.types import StructureBatch

    descriptors.compute(StructureBatch.from_ase([bulk("Cu", "fcc", a=3.61, cubic=True)]))


def in_process(path: Path, descriptors, partition_atoms: int) -> float:
    """Seconds for the same per-partition work without Dask or zarr, one torch thread."""
    import torch

    from dparallel.io import open_source
    from dparallel.store.plan import plan_partitions
    from dparallel.store.stats import FeatureStats

    torch.set_num_threads(1)
    warm_up(descriptors)
    source = open_source(path)
    plan = plan_partitions(source.atom_counts, partition_atoms)
    t0 = time.perf_counter()
    for start, stop in zip(plan.starts.tolist(), plan.stops.tolist(), strict=True):
        batch = source.read(start, stop)
        for per_element in descriptors.compute(batch).values():
            for arrays in per_element.values():
                FeatureStats.of(arrays["values"])
    return time.perf_counter() - t0


def in_process_with_store(path: Path, store: Path, descriptors, partition_atoms: int) -> float:
    """Seconds for ``featurize_in_process``: the same tasks and zarr writes, no Dask."""
    import torch

    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    featurize_in_process(
        path, store, descriptors, FeaturizeOptions(partition_atoms=partition_atoms)
    )
    return time.perf_counter() - t0


def on_dask(
    path: Path, store: Path, descriptors, partition_atoms: int, workers: int, malloc_tune: bool
):
    """(seconds, worker peak RSS MiB) of ``featurize`` on a fresh LocalCluster."""
    from distributed import Client, LocalCluster

    from dparallel.cluster.allocator import ENV_MALLOC_TUNE
    from dparallel.workflow.featurize import FeaturizeOptions, featurize

    env = {} if malloc_tune else {ENV_MALLOC_TUNE: "0"}
    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            dashboard_address="127.0.0.1:0",
            env=env,
        ) as c,
        Client(c) as client,
    ):
        client.run(warm_up, descriptors)  # same warm-up as the in-process runs, not timed
        t0 = time.perf_counter()
        featurize(
            path,
            store,
            descriptors,
            FeaturizeOptions(partition_atoms=partition_atoms, client=client),
        )
        seconds = time.perf_counter() - t0
        rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return seconds, max(rss.values()) / 1024


def fresh(store: Path) -> None:
    """Remove the last run's store and flush dirty pages, so no run pays for another's I/O."""
    shutil.rmtree(store, ignore_errors=True)
    os.sync()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--structures", type=int, default=2000)
    parser.add_argument("--partition-atoms", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3, help="rounds; medians are printed")
    parser.add_argument("--no-derivatives", action="store_true")
    parser.add_argument(
        "--no-malloc-tune",
        action="store_true",
        help="keep Dask's MALLOC_TRIM_THRESHOLD_ effect in workers (DPARALLEL_MALLOC_TUNE=0)",
    )
    args = parser.parse_args()
    descriptors = descriptor_set(not args.no_derivatives)
    tune = not args.no_malloc_tune
    times: dict[str, list[float]] = {}
    rss: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        small = make_dataset(tmp_path / "cu.extxyz", args.structures)
        large = repeat_file(small, tmp_path / "cu10.extxyz", 10)
        part = args.partition_atoms
        store = tmp_path / "out.zarr"
        for _ in range(args.repeats):  # interleaved rounds: drift of the machine hits all alike
            fresh(store)
            times.setdefault("kernels", []).append(in_process(small, descriptors, part))
            times.setdefault("store", []).append(
                in_process_with_store(small, store, descriptors, part)
            )
            for workers in (1, 2):
                fresh(store)
                seconds, peak = on_dask(small, store, descriptors, part, workers, tune)
                times.setdefault(f"w{workers}", []).append(seconds)
                rss[f"w{workers}"] = max(rss.get(f"w{workers}", 0.0), peak)
        fresh(store)
        t10, rss10 = on_dask(large, store, descriptors, part, 2, tune)
    med = {name: statistics.median(values) for name, values in times.items()}
    n = args.structures
    rows = [
        ("in-process kernels (no Dask, no store)", n, "kernels"),
        ("in-process kernels + zarr writes", n, "store"),
        ("featurize, 1 worker", n, "w1"),
        ("featurize, 2 workers", n, "w2"),
    ]
    print(
        f"ACSF {descriptors.acsf.n_features('Cu')} features, "
        f"derivatives={descriptors.derivatives}, partition_atoms={part}, "
        f"malloc tune={'on' if tune else 'off'}, medians of {args.repeats} rounds"
    )
    print(
        f"{'run':40s} {'structures':>10s} {'s':>8s} {'spread s':>13s} {'struct/s':>9s} "
        f"{'atoms/s':>9s} {'worker RSS MiB':>15s}"
    )

    def row(name: str, count: int, t: float, spread: str, peak: float) -> None:
        print(
            f"{name:40s} {count:>10d} {t:>8.2f} {spread:>13s} {count / t:>9.0f} "
            f"{32 * count / t:>9.0f} {peak:>15.0f}"
        )

    for name, count, key in rows:
        spread = f"{min(times[key]):.2f}-{max(times[key]):.2f}"
        row(name, count, med[key], spread, rss.get(key, float("nan")))
    row("featurize, 2 workers, 10x data", 10 * n, t10, "1 run", rss10)
    efficiency = med["w1"] / (2 * med["w2"])
    overhead = med["w1"] / med["store"] - 1
    for label, value, target in (
        ("parallel efficiency, 2 workers", f"{efficiency:.1%}", efficiency >= 0.90),
        ("Dask overhead: 1 worker vs in-process, same work", f"{overhead:+.1%}", overhead <= 0.10),
        (
            "store writes: in-process + zarr vs kernels",
            f"{med['store'] / med['kernels'] - 1:+.1%}",
            None,
        ),
        (
            "1 worker vs in-process kernels without store",
            f"{med['w1'] / med['kernels'] - 1:+.1%}",
            None,
        ),
        ("worker peak RSS, 10x data / 1x", f"{rss10 / rss['w2']:.2f}", rss10 / rss["w2"] <= 1.1),
    ):
        verdict = "" if target is None else ("  (target met)" if target else "  (target MISSED)")
        print(f"{label:50s}: {value}{verdict}")


if __name__ == "__main__":
    main()
