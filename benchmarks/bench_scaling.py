"""Featurization throughput on Dask: 1 vs 2 workers, overhead vs in-process, worker peak RSS.

From one run on the same data and descriptors (rattled, strained 32-atom fcc Cu cells,
ACSF with 8 radial + 8 angular functions at 5 Å, values + per-pair derivatives):

* in-process baseline: the same kernels (read → neighbor list → ACSF → statistics) called
  partition by partition in this process, one torch thread, no Dask and no store;
* ``featurize`` on a LocalCluster of 1 and 2 worker processes (1 thread each) into zarr;
* parallel efficiency = t(1 worker) / (2 · t(2 workers));
* in-process with store: ``featurize_in_process`` (same tasks and zarr writes, no Dask);
* Dask overhead = t(1 worker) / t(in-process with store) − 1; store cost is printed too;
* worker peak RSS (max over workers, from getrusage) for the dataset and one 10× larger.

    python benchmarks/bench_scaling.py [--structures 2000] [--no-derivatives]
"""

from __future__ import annotations

import argparse
import resource
import shutil
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
    from dparallel.workflow.plan import plan_partitions
    from dparallel.workflow.stats import FeatureStats

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

    from dparallel.workflow.featurize import featurize_in_process

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    featurize_in_process(path, store, descriptors, partition_atoms=partition_atoms)
    return time.perf_counter() - t0


def on_dask(path: Path, store: Path, descriptors, partition_atoms: int, workers: int):
    """(seconds, worker peak RSS MiB) of ``featurize`` on a fresh LocalCluster."""
    from distributed import Client, LocalCluster

    from dparallel.workflow.featurize import featurize

    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address="127.0.0.1:0") as c,
        Client(c) as client,
    ):
        client.run(warm_up, descriptors)  # same warm-up as the in-process runs, not timed
        t0 = time.perf_counter()
        featurize(path, store, descriptors, partition_atoms=partition_atoms, client=client)
        seconds = time.perf_counter() - t0
        rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return seconds, max(rss.values()) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--structures", type=int, default=2000)
    parser.add_argument("--partition-atoms", type=int, default=4000)
    parser.add_argument("--no-derivatives", action="store_true")
    args = parser.parse_args()
    descriptors = descriptor_set(not args.no_derivatives)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        small = make_dataset(tmp_path / "cu.extxyz", args.structures)
        large = repeat_file(small, tmp_path / "cu10.extxyz", 10)
        t_ref = in_process(small, descriptors, args.partition_atoms)
        t_store = in_process_with_store(
            small, tmp_path / "inproc.zarr", descriptors, args.partition_atoms
        )
        t1, rss1 = on_dask(small, tmp_path / "w1.zarr", descriptors, args.partition_atoms, 1)
        t2, rss2 = on_dask(small, tmp_path / "w2.zarr", descriptors, args.partition_atoms, 2)
        t10, rss10 = on_dask(large, tmp_path / "w10.zarr", descriptors, args.partition_atoms, 2)
    rows = [
        ("in-process kernels (no Dask)", args.structures, t_ref, float("nan")),
        ("in-process kernels + zarr writes", args.structures, t_store, float("nan")),
        ("featurize, 1 worker", args.structures, t1, rss1),
        ("featurize, 2 workers", args.structures, t2, rss2),
        ("featurize, 2 workers, 10x data", 10 * args.structures, t10, rss10),
    ]
    print(
        f"ACSF {descriptors.acsf.n_features('Cu')} features, "
        f"derivatives={descriptors.derivatives}, "
        f"partition_atoms={args.partition_atoms}"
    )
    print(
        f"{'run':34s} {'structures':>10s} {'s':>8s} {'struct/s':>10s} {'atoms/s':>10s} "
        f"{'worker RSS MiB':>15s}"
    )
    for name, n, t, rss in rows:
        print(f"{name:34s} {n:>10d} {t:>8.2f} {n / t:>10.0f} {32 * n / t:>10.0f} {rss:>15.0f}")
    for label, value in (
        ("parallel efficiency, 2 workers", f"{t1 / (2 * t2):.1%}"),
        ("Dask overhead: 1 worker vs in-process + zarr", f"{t1 / t_store - 1:+.1%}"),
        ("store writes: in-process + zarr vs kernels", f"{t_store / t_ref - 1:+.1%}"),
        ("worker peak RSS, 10x data / 1x", f"{rss10 / rss2:.2f}"),
    ):
        print(f"{label:46s}: {value}")


if __name__ == "__main__":
    main()
