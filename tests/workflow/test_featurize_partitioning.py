"""Default partitioning: derived from the data and the workers, never making a store stale."""

from __future__ import annotations

import numpy as np
import pytest

from dparallel.datasets import write_emt_cu
from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.io import open_source
from dparallel.store import open_store
from dparallel.store.plan import (
    MAX_PARTITION_ATOMS,
    MIN_PARTITION_ATOMS,
    MIN_SPLIT_ATOMS,
    derived_partition_atoms,
    plan_partitions,
)
from dparallel.workflow.featurize import (
    FeaturizeOptions,
    _warn_idle_workers,
    featurize_in_process,
    featurize_status,
    prepare_featurize,
)


def _dset() -> DescriptorSet:
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.5, 0.0)], narrow=[(0.02, 1.0, 1.0, 0.0)])
    return DescriptorSet(acsf=acsf, derivatives=True)


@pytest.mark.parametrize(
    ("total", "workers", "expected", "partitions"),
    [
        (51_600, 2, 6_454, 8),  # water ×25: 8 tasks for 2 workers (share + largest structure)
        # the minimum would make 11 tasks for 8 workers (a second round with 5 idle): one
        # round of 8 larger ones
        (51_600, 8, 6_452, 8),
        (10_000_000, 2, MAX_PARTITION_ATOMS, 500),  # never above the maximum
        (4_000, 2, 2_004, 2),  # less than the minimum per worker: one task per worker
        (51_600, 16, 3_229, 16),
        (100, 8, MIN_SPLIT_ATOMS, 1),  # tiny data: one task, never split below 1,000 atoms
        (26_000, 2, MIN_PARTITION_ATOMS, 6),  # 6 tasks at the minimum: 3 whole rounds
        (21_600, 2, 5_400, 4),  # 5 tasks at the minimum (one idle worker at the end): 4
    ],
)
def test_derived_size_gives_several_tasks_per_worker(total, workers, expected, partitions):
    counts = np.full(total // 4, 4)  # 4-atom structures
    atoms = derived_partition_atoms(counts, workers)
    assert atoms == expected
    assert plan_partitions(counts, atoms).n_partitions == partitions


@pytest.mark.parametrize("workers", [2, 3, 8, 16])
def test_derived_partitions_fill_whole_rounds_of_the_workers(workers):
    """Where the derived size is neither the maximum nor one task per worker, the plan's
    partition count is a multiple of the workers: no last round with idle workers."""
    rng = np.random.default_rng(workers)
    for _ in range(40):
        counts = rng.integers(1, 200, size=int(rng.integers(50, 3_000)))
        atoms = derived_partition_atoms(counts, workers)
        n = plan_partitions(counts, atoms).n_partitions
        if MIN_PARTITION_ATOMS <= atoms < MAX_PARTITION_ATOMS and n >= workers:
            assert n % workers == 0, (int(counts.sum()), atoms, n)


def test_derived_store_stays_current_for_any_worker_count(tmp_path):
    data = write_emt_cu(tmp_path / "cu.extxyz", n_structures=160, seed=3)  # ≥ 4,000 atoms
    store_path = tmp_path / "s.zarr"
    # < 5,000 atoms per worker: one task per worker
    n_atoms = featurize_in_process(data, store_path, _dset(), n_workers=2).n_atoms
    store = open_store(store_path)
    assert store.n_partitions == 2
    largest = int(open_source(data).atom_counts.max())
    recorded = store.attrs["config"]["ingest"]["partition_atoms"]
    assert recorded == -(-n_atoms // 2) + largest  # what was derived is recorded
    status = featurize_status(data, store_path, _dset())  # derived: any partitioning matches
    assert status.current, status.differences
    # a rerun derived for 8 workers resumes this store instead of replacing it
    _, again = prepare_featurize(data, store_path, _dset(), n_workers=8)
    assert again.n_partitions == 2 and again.is_complete
    # an explicit size is compared with the store's, as before
    explicit = featurize_status(data, store_path, _dset(), FeaturizeOptions(partition_atoms=500))
    assert not explicit.current
    assert any("partition_atoms" in d for d in explicit.differences)
    assert featurize_status(
        data, store_path, _dset(), FeaturizeOptions(partition_atoms=recorded)
    ).current


def test_fewer_partitions_than_workers_warns(tmp_path):
    data = write_emt_cu(tmp_path / "cu.extxyz", n_structures=3, seed=4)
    _, store = prepare_featurize(data, tmp_path / "s.zarr", _dset(), n_workers=4)
    pending = store.pending_partitions().tolist()
    assert len(pending) == 1  # 3 small structures: one partition of ≥ 1,000 atoms or all
    with pytest.warns(UserWarning, match=r"1 partitions for 4 workers: 3 workers stay idle"):
        _warn_idle_workers(store, pending, 4, FeaturizeOptions())


def _idle_warning(tmp_path, options: FeaturizeOptions) -> str:
    data = write_emt_cu(tmp_path / "cu.extxyz", n_structures=3, seed=4)
    _, store = prepare_featurize(data, tmp_path / "s.zarr", _dset(), options, n_workers=4)
    with pytest.warns(UserWarning, match="stay idle") as caught:
        _warn_idle_workers(store, store.pending_partitions().tolist(), 4, options)
    return str(caught[0].message)


def test_idle_warning_of_a_derived_size_names_the_floor_and_the_option(tmp_path):
    text = _idle_warning(tmp_path, FeaturizeOptions())
    assert f"at least {MIN_SPLIT_ATOMS} atoms unless partition_atoms (--partition-atoms)" in text


def test_idle_warning_of_a_given_size_says_that_size_in_the_callers_words(tmp_path):
    """`dparallel run` sets the size as partitioning.atoms: no --partition-atoms, no floor."""
    options = FeaturizeOptions(
        partition_atoms=2000, option_names={"partition_atoms": "partitioning.atoms"}
    )
    text = _idle_warning(tmp_path, options)
    assert "at most 2000 atoms as partitioning.atoms sets" in text
    assert "--partition-atoms" not in text and f"at least {MIN_SPLIT_ATOMS}" not in text


@pytest.mark.parametrize("bad", [0, -5, 2.5, True])
def test_ingest_and_featurize_refuse_one_bad_size_alike(tmp_path, bad):
    """``partition_atoms=0`` through the API was 20,000 atoms in ingest (``or`` took 0 for
    "not given") but a ConfigError in featurize; both now check it in one place."""
    from dparallel.errors import ConfigError
    from dparallel.workflow.ingest import IngestOptions, prepare_ingest

    data = write_emt_cu(tmp_path / "cu.extxyz", n_structures=4, seed=1)
    message = (
        rf"^partition_atoms \(--partition-atoms\) must be a whole number of atoms ≥ 1, got "
        rf"{bad!r}; leave it out for the default \(20,000 atoms, or derived from the workers\)$"
    )
    with pytest.raises(ConfigError, match=message):
        prepare_ingest(open_source(data), tmp_path / "i.zarr", IngestOptions(partition_atoms=bad))
    with pytest.raises(ConfigError, match=message):
        prepare_featurize(data, tmp_path / "f.zarr", _dset(), FeaturizeOptions(partition_atoms=bad))
    assert not (tmp_path / "i.zarr").exists() and not (tmp_path / "f.zarr").exists()
    named = FeaturizeOptions(partition_atoms=bad, option_names={"partition_atoms": "p.atoms"})
    with pytest.raises(ConfigError, match=r"^p\.atoms must be a whole number"):
        featurize_status(data, tmp_path / "f.zarr", _dset(), named)


def test_no_size_means_the_one_default_in_ingest_and_featurize(tmp_path):
    from dparallel.workflow.ingest import IngestOptions, prepare_ingest

    data = write_emt_cu(tmp_path / "cu.extxyz", n_structures=4, seed=1)
    ingested = prepare_ingest(
        open_source(data), tmp_path / "i.zarr", IngestOptions(partition_atoms=None)
    )
    _, featurized = prepare_featurize(
        data, tmp_path / "f.zarr", _dset(), FeaturizeOptions(), n_workers=None
    )
    for store in (ingested, featurized):
        assert store.plan.target_atoms == MAX_PARTITION_ATOMS
