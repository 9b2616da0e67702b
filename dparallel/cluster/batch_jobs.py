"""What the batch system says of the jobs that should run a cluster's workers.

A dask-jobqueue cluster (``kind: slurm``) submits jobs whose workers join the scheduler
once the queue starts them: when none has joined, the reason is in the queue (a job
pending on drained nodes, one cancelled or past its walltime), not in Dask.
:func:`jobs_state` says it in one phrase, for the run's wait for a worker and its error
(:mod:`dparallel.cluster.dispatch`).
"""

from __future__ import annotations

import logging
import subprocess
from typing import Any

__all__ = ["jobs_state"]

logger = logging.getLogger(__name__)

#: Seconds ``squeue`` may take (a busy controller answers slowly; the phrase is a courtesy)
SQUEUE_TIMEOUT_S = 10.0


def jobs_state(client: Any) -> str | None:
    """``"SLURM jobs 12 PENDING (ReqNodeNotAvail), 13 not in the queue …"`` for the jobs of
    the dask-jobqueue cluster ``client`` was made from; ``None`` for any other cluster.
    Never raises: a queue that cannot be asked is said so."""
    cluster = getattr(client, "cluster", None)
    jobs = getattr(cluster, "workers", None)
    if type(cluster).__name__ != "SLURMCluster" or not isinstance(jobs, dict):
        return None
    ids = [str(job.job_id) for job in list(jobs.values()) if getattr(job, "job_id", None)]
    if not ids:
        return "no SLURM job submitted (see the log for sbatch's error)"
    return "SLURM jobs " + ", ".join(f"{i} {state}" for i, state in _squeue(ids).items())


def _squeue(ids: list[str]) -> dict[str, str]:
    """Job id → its state (and reason) as ``squeue`` gives it, for each of ``ids``."""
    gone = (
        "not in the queue any more (ended: cancelled, failed or past its walltime; its "
        "output: slurm-ID.out where it was submitted)"
    )
    command = ["squeue", "--noheader", f"--jobs={','.join(ids)}", "--format=%i %T %r"]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=SQUEUE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.debug("squeue failed", exc_info=True)
        return {i: f"of unknown state (squeue: {type(exc).__name__}: {exc})" for i in ids}
    if done.returncode and "Invalid job id" not in done.stderr:  # all gone: that error
        why = done.stderr.strip() or f"exit status {done.returncode}"
        return {i: f"of unknown state (squeue: {why})" for i in ids}
    listed: dict[str, str] = {}
    for line in done.stdout.splitlines():
        job, _, rest = line.strip().partition(" ")
        state, _, reason = rest.partition(" ")
        if job:
            listed[job] = f"{state} ({reason})" if reason and reason != "None" else state
    return {i: listed.get(i, gone) for i in ids}
