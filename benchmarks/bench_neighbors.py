"""Neighbour lists: dparallel's ``neighbor_list`` against vesin and ASE, one thread.

Usage: ``PYTHONPATH=. python benchmarks/bench_neighbors.py [--repeats 5]``.

Structures as in training sets: water-like periodic cells at the density of n2p2's water
example (rc = 12, its cutoff in bohr), rattled fcc Cu supercells (rc = 6 Å), a sparse
non-periodic cluster. Each row is a batch of copies of one structure; times are per
structure, best of ``--repeats``. dparallel takes its all-pairs path for structures of at
most ``SMALL_CELL_ATOMS`` atoms (:mod:`dparallel.neighbors._small_cells`) and vesin above
(the "dparallel" column shows which); "vesin" is the same call with every structure sent
to vesin (``NeighborList(full_list=True, sorted=True, n_threads=1)``, as before), "ASE"
is ``ase.neighborlist.neighbor_list("ijSdD")``. Speed-up = vesin (or ASE) time / dparallel.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import ase
import numpy as np
from ase.build import bulk
from ase.neighborlist import neighbor_list as ase_neighbor_list


def structures(rng: np.random.Generator) -> list[tuple[str, ase.Atoms, float, int]]:
    """(label, atoms, cutoff, copies) rows."""
    rows = []
    for n in (48, 192, 640):
        side = (n / 192) ** (1 / 3) * 24.62  # n2p2's 192-atom water cell is 24.62 bohr
        atoms = ase.Atoms(numbers=np.full(n, 8), positions=rng.uniform(0, side, (n, 3)),
                          cell=np.eye(3) * side, pbc=True)  # fmt: skip
        rows.append((f"water-like, {n} atoms, rc 12", atoms, 12.0, max(2, 2000 // n)))
    for rep in (3, 5, 8, 13):
        atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat(rep)
        atoms.rattle(0.05, seed=1)
        copies = max(1, 2000 // len(atoms))
        rows.append((f"fcc Cu, {len(atoms)} atoms, rc 6", atoms, 6.0, copies))
    n = 2048
    cluster = ase.Atoms(numbers=np.full(n, 8), positions=rng.uniform(0, 40, (n, 3)))
    rows.append((f"sparse cluster, {n} atoms, rc 6", cluster, 6.0, 1))
    return rows


def best(fn, repeats: int) -> float:  # noqa: ANN001
    """Best wall time of ``repeats`` calls (s)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import dparallel.neighbors._vesin as nl_module
    from dparallel.neighbors import neighbor_list
    from dparallel.neighbors._small_cells import SMALL_CELL_ATOMS
    from dparallel.types import StructureBatch

    rng = np.random.default_rng(0)
    print(f"{'structure':34s} {'pairs/str':>10s} {'dparallel ms':>13s} {'vesin ms':>9s} "
          f"{'ASE ms':>8s} {'vs vesin':>9s} {'vs ASE':>7s}")  # fmt: skip
    for label, atoms, cutoff, copies in structures(rng):
        batch = StructureBatch.from_ase([atoms] * copies)
        neighbor_list(batch, cutoff)  # compiled code loaded, memory touched
        ours = best(lambda: neighbor_list(batch, cutoff), args.repeats) / copies  # noqa: B023
        saved = nl_module.SMALL_CELL_ATOMS
        nl_module.SMALL_CELL_ATOMS = -1  # every structure through vesin
        try:
            theirs = best(lambda: neighbor_list(batch, cutoff), args.repeats) / copies  # noqa: B023
        finally:
            nl_module.SMALL_CELL_ATOMS = saved
        reps = max(1, args.repeats // 2)
        with_ase = best(lambda: ase_neighbor_list("ijSdD", atoms, cutoff), reps)  # noqa: B023
        pairs = neighbor_list(batch.select(0, 1), cutoff).n_pairs
        path = "" if len(atoms) <= SMALL_CELL_ATOMS else " (vesin)"
        times = f"{ours * 1e3:>13.2f} {theirs * 1e3:>9.2f} {with_ase * 1e3:>8.1f}"
        ratios = f"{theirs / ours:>8.2f}x {with_ase / ours:>6.1f}x{path}"
        print(f"{label:34s} {pairs:>10,d} {times} {ratios}")


if __name__ == "__main__":
    main()
