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
