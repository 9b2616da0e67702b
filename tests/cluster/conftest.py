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


@pytest.fixture(scope="session")
def slurm_daemons(tmp_path_factory: pytest.TempPathFactory):
    """A single-node SLURM on this machine (``tests/slurmprocess.py``: munged, slurmctld
    and slurmd as root, files in a temporary folder), ``SLURM_CONF`` naming it in this
    process's environment (dask-jobqueue's ``sbatch`` and the CLI's inherit it); stopped at
    the end. Skips where SLURM or munge is not installed, or not as root."""
    import os

    import slurmprocess

    reason = slurmprocess.missing()
    if reason is not None:
        pytest.skip(f"no single-node SLURM: {reason}")
    # sized like docs/deploy.md's example node (16 cores, 64 GB; slurmd takes it as given)
    slurm = slurmprocess.start(tmp_path_factory.mktemp("slurm"), cpus=16, memory_mb=65536)
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = slurm.env["SLURM_CONF"]
    try:
        yield slurm
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        slurm.stop()


@pytest.fixture
def slurm(slurm_daemons, tmp_path, monkeypatch):
    """:func:`slurm_daemons` for one test, run from ``tmp_path`` (where the jobs' output
    files ``slurm-ID.out`` land); afterwards its node back in service and its queue empty."""
    monkeypatch.chdir(tmp_path)
    try:
        yield slurm_daemons
    finally:
        slurm_daemons.cancel_all()
        if slurm_daemons.node_state() != "idle":
            slurm_daemons.resume()
