"""Fixtures of the cluster tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def client():
    """A Dask client of a one-worker, two-thread cluster inside this process."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c
