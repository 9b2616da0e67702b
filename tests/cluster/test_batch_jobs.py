"""What a run says when its SLURM jobs do not give it a worker: against a real single-node
SLURM (``slurm`` fixture, tests/cluster/conftest.py)."""

from __future__ import annotations

import re

import pytest

from dparallel.cluster.batch_jobs import jobs_state

#: squeue's state and reason of a job whose only node is drained (the reason changes
#: from the scheduler's first look to its later ones)
DRAINED = r"PENDING \((ReqNodeNotAvail|Nodes required for job are DOWN, DRAINED)"


def test_a_cluster_of_no_batch_system_has_no_jobs_state(client) -> None:
    assert jobs_state(client) is None


@pytest.mark.integration
@pytest.mark.slow
def test_jobs_on_a_drained_node_stop_the_run_naming_their_queue_state(slurm, monkeypatch):
    """The queue never starts the job (its node drained): the run's wait for a worker is
    bounded and its warning and error give the jobs' state and reason as ``squeue`` does
    (they said only "an adaptive cluster … start some with `dask worker ADDRESS`");
    closing the cluster cancels the jobs."""
    pytest.importorskip("dask_jobqueue")
    from dparallel.cluster import ClusterSpec, connect
    from dparallel.cluster.dispatch import ENV_WORKER_WAIT, Dispatch, run_partitions
    from dparallel.errors import ClusterError

    monkeypatch.setenv(ENV_WORKER_WAIT, "2")
    slurm.run("scontrol", "update", f"nodename={slurm.node}", "state=drain", "reason=test")
    spec = ClusterSpec(
        kind="slurm", dashboard_address="127.0.0.1:0", slurm={"memory": "1GB", "jobs": 1}
    )
    with connect(spec) as handle:
        (job,) = [job for job, _ in slurm.jobs()]
        with pytest.warns(UserWarning, match=rf"SLURM jobs {job} {DRAINED}"):
            failures = run_partitions(handle.client, abs, [0], Dispatch(args=lambda p: (p,)))
        assert slurm.jobs() == [(job, "PENDING")]  # the queue's state: never started
    (error,) = failures.values()
    assert isinstance(error, ClusterError)
    assert re.search(rf"SLURM jobs {job} {DRAINED}", str(error)), error
    assert "dask worker" not in str(error)
    slurm.wait_for("the job cancelled", lambda: not slurm.jobs(), 30)
