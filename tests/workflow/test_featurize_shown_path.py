"""An overwrite builds the new store aside; progress and the dashboard name the user's path."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.store import target_path
from dparallel.workflow.featurize import FeaturizeOptions, featurize, featurize_in_process

pytestmark = [pytest.mark.integration]


def _descriptors() -> DescriptorSet:
    acsf = ACSF.uniform(
        elements=["Cu"], r_cut=4.0, cutoff="cos", radial=[[0.5, 0.0]], narrow=[], wide=[]
    )
    return DescriptorSet(acsf=acsf, derivatives=False)


def test_the_target_of_a_store_built_aside_is_the_users_path():
    assert target_path("runs/s.zarr.creating-host-12-0a1b2c3d") == Path("runs/s.zarr")
    assert target_path("runs/s.zarr") == Path("runs/s.zarr")
    assert target_path("runs/s.zarr.creating") == Path("runs/s.zarr.creating")


def test_an_overwrite_reports_progress_under_the_users_path(tmp_path, caplog):
    from distributed import Client, LocalCluster

    from dparallel.datasets import write_emt_cu

    data = write_emt_cu(tmp_path / "cu.extxyz", n_structures=8, seed=3)
    target = tmp_path / "s.zarr"
    featurize_in_process(data, target, _descriptors(), FeaturizeOptions(partition_atoms=60))
    events: list[dict] = []
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster,
        Client(cluster) as client,
        caplog.at_level(logging.INFO, logger="dparallel"),
    ):
        result = featurize(
            data,
            target,
            _descriptors(),
            FeaturizeOptions(
                partition_atoms=90,
                overwrite=True,
                client=client,
                progress=lambda event, done, total: events.append(event),
            ),
        )
    assert "building the replacement of" in caplog.text  # it was built aside
    assert result.store.path == target.resolve() and result.store.is_complete
    start = events[0]  # the dashboard's start event; the tasks publish under the same run
    assert start["kind"] == "start" and start["run"] == f"featurize:{target.resolve()}"
