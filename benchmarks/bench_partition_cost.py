"""Per-structure cost against per-atom cost: whether store/plan.py's atom balance is a work balance.

Run: ``PYTHONPATH=. python benchmarks/bench_partition_cost.py MOLECULES.extxyz BIG.extxyz
DESCRIPTORS.yaml [--structures 3000]``: reads ``--structures`` frames of a small-molecule
file (per-structure read cost) and the largest structure of the other (per-atom read cost),
and featurizes both with and without dG/dr (best of 3, one process). Prints the
per-structure cost in atom-equivalents of that large structure's atoms
(docs/store-format.md, "Balanced by work"). Store writes are not timed here: a
featurize's partition reports (``seconds_write``) give them.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import numpy as np
from bench_neighbors import best

from dparallel.io import open_source
from dparallel.neighbors import neighbor_list
from dparallel.workflow.descriptors_spec import load_descriptors
from dparallel.workflow.featurize_task import task_descriptors


def main() -> None:
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
