"""A featurize run's partitions balanced by estimated work (neighbour pairs), checked
against ASE's neighbour lists; stores planned by atoms alone still resume."""

from __future__ import annotations

import ase.io
import numpy as np
import pytest
from ase.build import bulk, fcc111, molecule
from ase.neighborlist import neighbor_list

import dparallel.workflow.featurize_plan as featurize_plan_module
from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.io import open_source
from dparallel.store import open_store, plan_partitions
from dparallel.store.plan import ATOM_PAIRS, STRUCTURE_WORK
from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process
from dparallel.workflow.featurize_plan import featurize_plan

R_CUT = 5.0


def _mixed(path, n_molecules=600, n_slabs=12, n_bulk=24):
    """Molecules in vacuum, then fcc111 slabs with vacuum, then dense bulk cells, in blocks
    (as concatenated data sets are)."""
    frames = []
    for i in range(n_molecules):
        m = molecule(["CH4", "H2O", "CO2", "CH3OH"][i % 4])
        m.center(vacuum=6.0)
        m.pbc = False
        frames.append(m)
    frames += [fcc111("Cu", size=(3, 3, 4), vacuum=6.0) for _ in range(n_slabs)]
    frames += [bulk("Cu", "fcc", a=3.6, cubic=True) * (3, 3, 3) for _ in range(n_bulk)]
    for k, a in enumerate(frames):
        a.rattle(0.02, seed=k)
    ase.io.write(path, frames, format="extxyz")
    return frames


def _pairs(frames):
    """Ordered neighbour pairs within R_CUT of each structure, by ASE."""
    return np.array([len(neighbor_list("i", a, R_CUT)) for a in frames], np.float64)


def _reference_work(frames, plan):
    """Each partition's work with ASE's pair counts in place of the estimated ones."""
    counts = np.array([len(a) for a in frames], np.float64)
    pairs = _pairs(frames)
    k_ref = max(pairs[i] / counts[i] for i, a in enumerate(frames) if a.pbc.all())
    work = STRUCTURE_WORK + (ATOM_PAIRS * counts + pairs) / (ATOM_PAIRS + k_ref)
    return np.array([work[a:b].sum() for a, b in zip(plan.starts, plan.stops, strict=True)])


def test_index_records_cell_volume_and_periodic_directions(tmp_path):
    frames = _mixed(tmp_path / "mixed.extxyz", n_molecules=2, n_slabs=1, n_bulk=1)
    index = open_source(tmp_path / "mixed.extxyz").index
    periodic = [a.cell.volume if a.pbc.all() else np.nan for a in frames]  # the one used
    np.testing.assert_allclose(index.volumes, periodic)
    assert index.periodic.tolist() == [int(a.pbc.sum()) for a in frames]


def test_index_reads_n2p2_lattice_lines(tmp_path):
    atom = "atom 0.0 0.0 0.0 Cu 0.0 0.0 0.0 0.0 0.0"
    lattice = "lattice 10.0 0.0 0.0\nlattice 1.0 11.0 0.0\nlattice 0.0 0.0 12.0"
    text = f"begin\n{lattice}\n{atom}\nenergy 0.0\nend\nbegin\n{atom}\nenergy 0.0\nend\n"
    (tmp_path / "input.data").write_text(text)
    index = open_source(tmp_path / "input.data").index
    np.testing.assert_allclose(index.volumes, [1320.0, np.nan])  # 10 · 11 · 12
    assert index.periodic.tolist() == [3, 0]


def test_estimated_neighbours_follow_ase(tmp_path):
    """Per kind of structure, the estimated pairs per atom are within 2× of ASE's."""
    from dparallel.store.plan import estimated_work

    frames = _mixed(tmp_path / "mixed.extxyz", n_molecules=4, n_slabs=1, n_bulk=1)
    index = open_source(tmp_path / "mixed.extxyz").index
    work = estimated_work(index.counts, index.volumes, index.periodic, R_CUT)
    assert work is not None
    counts = index.counts.astype(np.float64)
    pairs = _pairs(frames)
    k_ref = pairs[-1] / counts[-1]  # the bulk cell: the densest
    estimated = (work - STRUCTURE_WORK) / counts * (ATOM_PAIRS + k_ref) - ATOM_PAIRS
    np.testing.assert_allclose(estimated, pairs / counts, rtol=1.0)  # slabs: ~0.6 of it


def test_partitions_are_balanced_by_ase_pair_work(tmp_path):
    frames = _mixed(tmp_path / "mixed.extxyz")
    source = open_source(tmp_path / "mixed.extxyz")
    by_atoms = _reference_work(frames, plan_partitions(source.atom_counts, 1_500))
    by_work = _reference_work(frames, featurize_plan(source, 1_500, R_CUT))
    assert by_atoms.max() / by_atoms.mean() > 1.15  # 1.21: the imbalance there is to remove
    assert by_work.max() / by_work.mean() < 1.1  # 1.05


def test_even_data_keeps_the_atom_plan(tmp_path):
    """Structures of one density: the plan by atoms, as stores made before were planned."""
    frames = [bulk("Cu", "fcc", a=3.6, cubic=True) * (n, 3, 3) for n in (1, 2, 3) * 20]
    ase.io.write(tmp_path / "cu.extxyz", frames, format="extxyz")
    source = open_source(tmp_path / "cu.extxyz")
    assert featurize_plan(source, 700, R_CUT) == plan_partitions(source.atom_counts, 700)


@pytest.mark.slow
def test_a_store_planned_by_atoms_resumes(tmp_path, monkeypatch):
    """A store planned by atoms alone (before the estimate) with a given partition size
    resumes with its plan, not refused as planned otherwise."""
    _mixed(tmp_path / "mixed.extxyz", n_molecules=100, n_slabs=2, n_bulk=3)
    acsf = ACSF.uniform(["H", "C", "O", "Cu"], r_cut=R_CUT, radial=[(0.5, 0.0)], narrow=[])
    dset = DescriptorSet(acsf=acsf, derivatives=False)
    options = FeaturizeOptions(partition_atoms=300)
    with monkeypatch.context() as patch:
        patch.setattr(featurize_plan_module, "_work", lambda source, r_cut: None)
        featurize_in_process(tmp_path / "mixed.extxyz", tmp_path / "s.zarr", dset, options)
    old = open_store(tmp_path / "s.zarr").plan
    store = open_store(tmp_path / "s.zarr", mode="r+")
    store.clear_done(0)  # an interrupted run
    source = open_source(tmp_path / "mixed.extxyz")
    assert featurize_plan(source, 300, R_CUT) != old
    featurize_in_process(tmp_path / "mixed.extxyz", tmp_path / "s.zarr", dset, options)
    assert open_store(tmp_path / "s.zarr").plan == old


def test_without_a_bulk_cell_the_plan_is_by_atoms(tmp_path):
    """No structure periodic in all three: no density to measure by. The estimate took a
    2,000-atom cluster's atoms as 1,999 neighbours each (ASE: ~40-80 within 5 Å), so its
    partitions packed 5x the target's atoms of cheap molecules beside it."""
    from ase.cluster import Octahedron

    from dparallel.store.plan import estimated_work

    frames = []
    for i in range(300):
        m = molecule(["CH4", "H2O"][i % 2])
        m.center(vacuum=6.0)
        m.pbc = False
        frames.append(m)
    frames += [Octahedron("Cu", 9), fcc111("Cu", size=(3, 3, 4), vacuum=6.0)]  # cluster, slab
    ase.io.write(tmp_path / "noperiodic.extxyz", frames, format="extxyz")
    source = open_source(tmp_path / "noperiodic.extxyz")
    index = source.index
    assert estimated_work(index.counts, index.volumes, index.periodic, R_CUT) is None
    assert featurize_plan(source, 400, R_CUT) == plan_partitions(source.atom_counts, 400)
