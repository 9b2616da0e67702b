"""featurize on Dask workers from files ASE reads only from their start (an XDATCAR, a
LAMMPS dump): each worker reads its partitions from the index pass's random-access copy,
and the store holds the structures and labels ``ase.io.read`` gives (a dump's energy:
absent, not ASE's placeholder 0)."""

from __future__ import annotations

import ase.io
import numpy as np
import pytest
from ase.build import bulk

from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.store import open_store
from dparallel.workflow.featurize import FeaturizeOptions, featurize

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _dump(path, frames: list[ase.Atoms], rng: np.random.Generator) -> None:
    """A LAMMPS text dump of ``frames`` (orthorhombic cells) with random forces."""
    text = []
    for step, atoms in enumerate(frames):
        lx, ly, lz = np.diag(atoms.cell[:])
        text.append(
            f"ITEM: TIMESTEP\n{step}\nITEM: NUMBER OF ATOMS\n{len(atoms)}\n"
            f"ITEM: BOX BOUNDS pp pp pp\n0 {lx}\n0 {ly}\n0 {lz}\n"
            "ITEM: ATOMS id element x y z fx fy fz\n"
        )
        for i, (x, f) in enumerate(
            zip(atoms.positions, rng.normal(size=(len(atoms), 3)), strict=True)
        ):
            text.append(f"{i + 1} Cu " + " ".join(map(repr, [*x.tolist(), *f.tolist()])) + "\n")
    path.write_text("".join(text))


def test_workers_read_sequential_formats_as_ase_does(tmp_path, rng):
    from distributed import Client, LocalCluster

    frames = []
    for k in range(24):
        atoms = bulk("Cu", "fcc", a=3.6, cubic=True)
        atoms.rattle(0.05, seed=k)
        frames.append(atoms)
    ase.io.write(tmp_path / "XDATCAR", frames, format="vasp-xdatcar")
    _dump(tmp_path / "md.lammpstrj", frames, rng)
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.5, 0.0)], narrow=[])
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0")
    with cluster, Client(cluster) as client:
        for name, fmt in (("XDATCAR", "vasp-xdatcar"), ("md.lammpstrj", "lammps-dump-text")):
            path = tmp_path / name
            featurize(path, tmp_path / f"{name}.zarr", DescriptorSet(acsf=acsf),
                      FeaturizeOptions(client=client, format=fmt, partition_atoms=16))  # fmt: skip
            assert (tmp_path / f"{name}.dpframes").is_file()
            store = open_store(tmp_path / f"{name}.zarr")
            assert store.n_partitions > 2
            got, ref = store.read_structures(), ase.io.read(path, ":", format=fmt)
            np.testing.assert_array_equal(got.positions, np.concatenate([a.positions for a in ref]))
            np.testing.assert_array_equal(got.numbers, np.concatenate([a.numbers for a in ref]))
            np.testing.assert_array_equal(got.cells, [a.cell[:] for a in ref])
            np.testing.assert_array_equal(got.pbc, [a.pbc for a in ref])
            if fmt == "lammps-dump-text":  # forces as ASE reads them; no energy in a dump
                forces = np.concatenate([a.get_forces() for a in ref])
                np.testing.assert_array_equal(got.forces, forces)
                assert [a.get_potential_energy() for a in ref] == [0.0] * 24
            assert np.isnan(got.energy).all()
