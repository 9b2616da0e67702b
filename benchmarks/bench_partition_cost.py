"""Per-structure cost against per-atom cost: whether store/plan.py's atom balance is a work balance.

Run: ``PYTHONPATH=. python benchmarks/bench_partition_cost.py MOLECULES.extxyz BIG.extxyz
DESCRIPTORS.yaml [--structures 3000]``: reads ``--structures`` frames of a small-molecule
file (per-structure read cost) and the largest structure of the other (per-atom read cost),
and featurizes both with and without dG/dr (best of 3, one process). Prints the
per-structure cost in atom-equivalents of that large structure's atoms
(docs/store-format.md, "Balanced by work"). Store writes are not timed here: a
featurize's partition reports (``seconds_write``) give them.

``PYTHONPATH=. python benchmarks/bench_partition_cost.py balance [--workers 2 8]``: a
mixed extxyz built with ASE (molecules in vacuum, then fcc111 slabs with vacuum, then bulk
Cu/Au cells; ACSF r_cut 6 Å with dG/dr), planned for each worker count by atoms alone and
by the estimated work (``store.plan.estimated_work``), featurized in one process; each
partition's task is timed again (CPU time, best of 3: the dev machine's cores are shared).
Prints per plan the partitions' max/mean time and the workers' simulated makespan against
an even split (tasks in partition order to the first free worker, as Dask hands them out).
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_neighbors import best

from dparallel.io import open_source
from dparallel.neighbors import neighbor_list
from dparallel.workflow.descriptors_spec import load_descriptors
from dparallel.workflow.featurize_task import task_descriptors


def _mixed(path: Path, molecules: int, slabs: int, cells: int) -> None:
    """Molecules in vacuum, then fcc111 slabs with vacuum, then bulk cells, in blocks."""
    import ase.io
    from ase.build import bulk, fcc111, molecule

    names = ["CH4", "H2O", "CO2", "C6H6", "CH3OH", "C2H6", "H2CO"]
    frames = []
    for i in range(molecules):
        m = molecule(names[i % len(names)])
        m.center(vacuum=8.0)
        m.pbc = False
        frames.append(m)
    frames += [fcc111(("Au", "Cu")[i % 2], size=(3, 3, 4), vacuum=8.0) for i in range(slabs)]
    for i in range(cells):
        frames.append(
            bulk(("Au", "Cu")[i % 2], "fcc", a=(4.08, 3.6)[i % 2], cubic=True) * (3, 3, 3)
        )
    for k, a in enumerate(frames):
        a.rattle(0.05, seed=k)
    ase.io.write(path, frames, format="extxyz")


def _makespan(seconds: np.ndarray, workers: int) -> float:
    """Finish time of tasks handed out in order to the first free of ``workers``."""
    free = [0.0] * workers
    for s in seconds.tolist():
        heapq.heappush(free, heapq.heappop(free) + s)
    return max(free)


def balance() -> None:
    """Atoms-only plans against work plans on a mixed file (module docstring)."""
    import dparallel.workflow.featurize_plan as featurize_plan
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.store import open_store
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process
    from dparallel.workflow.featurize_task import featurize_partition

    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--structures", type=int, nargs=3, default=[3000, 150, 150])
    args = ap.parse_args(sys.argv[2:])
    acsf = ACSF.uniform(
        ["H", "C", "O", "Cu", "Au"],
        r_cut=6.0,
        radial=[(0.01, 0.0), (0.5, 2.5), (0.5, 4.0)],
        narrow=[(0.01, 1.0, -1.0, 0.0), (0.01, 1.0, 1.0, 0.0)],
    )
    dset = DescriptorSet(acsf=acsf, derivatives=True, dtype="float32")
    work = featurize_plan._work
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "mixed.extxyz"
        _mixed(data, *args.structures)
        source = open_source(data)
        print(f"{len(source)} structures, {int(source.atom_counts.sum())} atoms")
        print(
            "| workers | plan | partitions | atoms per partition | CPU s per partition "
            "| max/mean | makespan / even split |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for workers in args.workers:
            for name, estimate in (("atoms", lambda source, r_cut: None), ("work", work)):
                featurize_plan._work = estimate  # type: ignore[assignment]
                store = Path(tmp) / f"{name}{workers}.zarr"
                featurize_in_process(data, store, dset, FeaturizeOptions(), n_workers=workers)
                opened = open_store(store)

                def cpu(p: int, ref: Any = opened.ref) -> float:
                    t = time.process_time()
                    featurize_partition(source, ref, p, dset.to_dict(), torch_threads=1)
                    return time.process_time() - t

                secs = np.array([min(cpu(p) for _ in range(3)) for p in range(len(opened.plan))])
                atoms = opened.plan.atoms
                print(
                    f"| {workers} | {name} | {len(secs)} | {atoms.min()}–{atoms.max()} "
                    f"| {secs.min():.2f}–{secs.max():.2f} | {secs.max() / secs.mean():.2f} "
                    f"| {_makespan(secs, workers) / (secs.sum() / workers):.2f} |"
                )
        featurize_plan._work = work


def main() -> None:
    if sys.argv[1:2] == ["balance"]:
        balance()
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("molecules")
    ap.add_argument("big")
    ap.add_argument("descriptors")
    ap.add_argument("--structures", type=int, default=3000)
    args = ap.parse_args()
    small, other = open_source(args.molecules), open_source(args.big)
    n = min(args.structures, len(small))
    big = int(np.argmax(other.atom_counts))
    mols, one = small.read(0, n), other.read(big, big + 1)
    read_s = best(lambda: small.read(0, n), 3)
    read_b = best(lambda: other.read(big, big + 1), 3)
    per_atom_read = read_b / one.n_atoms
    per_structure = (read_s - mols.n_atoms * per_atom_read) / n
    print(
        f"read: {per_structure * 1e6:.0f} µs per structure, {per_atom_read * 1e6:.1f} µs "
        f"per atom ({n} structures of {mols.n_atoms / n:.1f} atoms; one of {one.n_atoms})"
    )
    spec = load_descriptors(args.descriptors)
    for derivatives in (True, False):
        dset = dataclasses.replace(spec, derivatives=derivatives)

        def featurize(b: Any, dset: Any = dset) -> None:
            task_descriptors(b, dset, neighbor_list(b, dset.r_cut), "cpu")

        featurize(mols)
        dense = best(lambda: featurize(one), 3) / one.n_atoms
        sparse = best(lambda: featurize(mols), 3) / mols.n_atoms
        c = per_structure / (per_atom_read + dense)
        print(
            f"featurize dG/dr={derivatives}: {dense * 1e6:.0f} µs per dense atom, "
            f"{sparse * 1e6:.1f} µs per molecule atom; a structure = {c:.1f} dense atoms "
            "(without store writes)"
        )


if __name__ == "__main__":
    main()
