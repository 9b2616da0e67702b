"""featurize_partition in this process: what a task does when Dask runs it again."""

from __future__ import annotations

import numpy as np

from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.store import StoreLease, open_store
from dparallel.workflow import featurize_task
from dparallel.workflow.featurize import FeaturizeOptions, prepare_featurize
from dparallel.workflow.featurize_task import featurize_partition


def test_a_done_partition_run_again_returns_its_report_and_computes_nothing(
    tmp_path, monkeypatch
) -> None:
    """Dask reruns a task whose held result was lost with a worker that left (and one a
    retired worker was running): it used to compute and write its partition again; now it
    returns the report the first run recorded."""
    from dparallel.datasets import write_emt_cu

    data = write_emt_cu(tmp_path / "cu.extxyz", n_structures=4, seed=3)
    acsf = ACSF.uniform(elements=["Cu"], r_cut=4.0, radial=[[0.5, 0.0]])
    spec = DescriptorSet(acsf=acsf).to_dict()
    path = tmp_path / "s.zarr"
    with StoreLease(path):
        source, store = prepare_featurize(
            data, path, DescriptorSet(acsf=acsf), FeaturizeOptions(partition_atoms=40)
        )
        first = featurize_partition(source, store.ref, 0, spec)
        written = open_store(path).read_features(0, "acsf")["Cu"]["values"]

        def computed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            raise AssertionError("partition 0 computed again")

        monkeypatch.setattr(featurize_task, "_compute", computed)
        again = featurize_partition(source, store.ref, 0, spec)
        assert again == first
        np.testing.assert_array_equal(
            open_store(path).read_features(0, "acsf")["Cu"]["values"], written
        )
        reopened = open_store(path, mode="r+")
        reopened.clear_done(0)  # marked not done (its marker's object is there, as 0)
        assert not reopened.is_done(0)
        with np.testing.assert_raises_regex(AssertionError, "computed again"):
            featurize_partition(source, store.ref, 0, spec)


def test_a_task_runs_with_its_torch_budget_and_gives_the_thread_its_own_back(
    tmp_path, monkeypatch
) -> None:
    """A task on torch (neighbor sums) set the calling thread's torch threads to its budget
    for good: featurize_in_process left a script's torch at 1 thread, and a task on a user's
    own Dask worker left that worker's thread so."""
    import torch

    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import NeighborSum

    data = write_emt_cu(tmp_path / "cu.extxyz", n_structures=2, seed=3)
    dset = DescriptorSet(neighbor_sum=NeighborSum(["Cu"], r_cut=4.0, n_sensitivities=2))
    assert dset.uses_torch
    seen = []
    compute = featurize_task._compute

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append(torch.get_num_threads())
        return compute(*args, **kwargs)

    monkeypatch.setattr(featurize_task, "_compute", spy)
    path = tmp_path / "s.zarr"
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        with StoreLease(path):
            source, store = prepare_featurize(data, path, dset, FeaturizeOptions())
            report = featurize_partition(source, store.ref, 0, dset.to_dict(), torch_threads=1)
        assert seen == [1] and report["torch_threads"] == 1
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(previous)
