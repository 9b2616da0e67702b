"""Several processes write disjoint partitions of one store without locks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import ase.io
import numpy as np
import pytest
import zarr

from dparallel.io import open_source
from dparallel.io.synthetic import random_structures
from dparallel.store import open_store
from dparallel.workflow.ingest import IngestOptions, ingest, prepare_ingest

ROOT = Path(__file__).resolve().parents[2]

WORKER = """
import sys
from dparallel.io import open_source
from dparallel.store import open_store
from dparallel.workflow.ingest import ingest_partition
src = open_source(sys.argv[1], on_error="skip")   # opened by path: nothing shipped
store = open_store(sys.argv[2], mode="r+")
k, n = int(sys.argv[3]), int(sys.argv[4])
for p in range(k, store.n_partitions, n):          # disjoint, interleaved partitions
    ingest_partition(src, store, p)
    store.write_atom_array("z2", p, store.read_partition(p).numbers ** 2)
"""


@pytest.mark.integration
def test_processes_write_disjoint_partitions(tmp_path, rng):
    path = tmp_path / "mixed.xyz"
    frames = random_structures(400, rng, max_atoms=30)
    ase.io.write(path, frames, format="extxyz")
    with open(path, "a") as f:  # one bad structure → a skipped record from one process
        f.write("1\nProperties=species:S:1:pos:R:3\nH 0 nan 0\n")
    n_procs = 3

    src = open_source(path, on_error="skip")
    store = prepare_ingest(src, tmp_path / "par.zarr", IngestOptions(partition_atoms=300))
    store.create_atom_array("z2", (), np.int64)
    assert store.n_partitions >= 3 * n_procs
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(path), str(store.path), str(k), str(n_procs)],
            env=env,
        )
        for k in range(n_procs)
    ]
    for proc in procs:
        assert proc.wait(timeout=240) == 0

    single = ingest(
        path, tmp_path / "one.zarr", IngestOptions(on_error="skip", partition_atoms=300)
    ).store
    single.create_atom_array("z2", (), np.int64)
    for p in range(single.n_partitions):
        single.write_atom_array("z2", p, single.read_partition(p).numbers ** 2)

    par = open_store(tmp_path / "par.zarr")
    assert par.is_complete
    assert par.read_structures().equals(single.read_structures())
    assert par.skipped() == single.skipped() and [i for i, _ in par.skipped()] == [400]
    np.testing.assert_array_equal(
        par.read_atom_array("z2", 0, 400), single.read_structures().numbers ** 2
    )
    a = zarr.open_group(str(tmp_path / "par.zarr"), mode="r")
    b = zarr.open_group(str(tmp_path / "one.zarr"), mode="r")
    for name in [*par.arrays()]:  # every array byte-for-byte (padding included)
        np.testing.assert_array_equal(a[name][...], b[name][...], err_msg=name)
