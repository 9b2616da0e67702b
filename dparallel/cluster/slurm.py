"""``kind: slurm``: workers in SLURM jobs through dask-jobqueue (``dparallel[slurm]``).

:func:`dparallel.cluster.connect` makes the ``SLURMCluster`` (:func:`slurm_cluster`: its
scheduler runs here) and submits its jobs at once (:func:`submit_jobs`: ``sbatch``'s
answers awaited); docs/deploy.md ("SLURM") says what was verified against SLURM 22.05.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from dparallel.errors import ClusterError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dparallel.cluster.spec import ClusterSpec

__all__ = ["import_jobqueue", "slurm_cluster", "submit_jobs"]


def import_jobqueue() -> Any:
    """The ``dask_jobqueue`` module, imported without its import's side effect: it sets
    SIGINT's handler to ``sys.exit`` (its ``runner.py``), which replaced the command's own
    Ctrl-C handling and, outside the main thread (featurize connects in the background),
    failed the import (``ValueError: signal only works in main thread``). Import it in the
    main thread first (:func:`connect_in_background` does) where a thread will connect."""
    if sys.modules.get("dask_jobqueue") is not None:  # None: its import failed before
        return sys.modules["dask_jobqueue"]
    if threading.current_thread() is not threading.main_thread():
        raise ClusterError(
            "dask-jobqueue must be imported in the main thread (it sets a signal handler): "
            "call dparallel.cluster.slurm.import_jobqueue() there before connecting "
            "to kind 'slurm' in another thread"
        )
    handler = signal.getsignal(signal.SIGINT)
    try:
        import dask_jobqueue
    except ImportError:
        raise ClusterError(
            "cluster.kind is 'slurm' but dask-jobqueue is not installed; "
            "install the optional extra: pip install 'dparallel[slurm]'"
        ) from None
    finally:
        signal.signal(signal.SIGINT, handler)
    return dask_jobqueue


def submit_jobs(cluster: Any, jobs: int) -> None:
    """Submit ``jobs`` jobs of ``cluster`` now and wait for ``sbatch``'s answers (not for
    the workers, which join once the queue starts them); on an error, close ``cluster``."""
    try:
        _submit_jobs(cluster, jobs)
    except BaseException:
        _close_unsubmitted(cluster)
        raise


def _submit_jobs(cluster: Any, jobs: int) -> None:
    """:func:`submit_jobs`, leaving ``cluster`` open. A job ``sbatch`` refuses (a
    partition, account, size or walltime the cluster does not have) is a
    :class:`ClusterError` with its answer, at once: ``cluster.scale`` submitted them in a
    background task, whose failure only Dask's log said, and the run waited for a worker
    that could not come."""
    for _ in range(jobs):
        cluster.worker_spec.update(cluster.new_worker_spec())
    try:
        cluster.sync(cluster._correct_state)  # what scale() leaves to the event loop
    except RuntimeError as exc:  # dask-jobqueue's: the command, its exit code and output
        answer = " ".join(str(exc).rpartition("stderr:")[2].split()) or str(exc)
        raise ClusterError(
            f"SLURM refuses the workers' job: {answer}; fix the workflow's cluster.slurm "
            "(queue, account, cores, memory, walltime, job_extra_directives) and run the "
            "same command again"
        ) from None
    except FileNotFoundError:
        raise ClusterError(
            "cluster.kind is 'slurm' but there is no sbatch on PATH: run dparallel where "
            "SLURM's commands are (a login node), or start the workers yourself and give "
            "--scheduler"
        ) from None


def _close_unsubmitted(cluster: Any) -> None:
    """Close a cluster whose jobs were not all submitted: cancel those that were (a job
    never submitted counts as failed, which ``SpecCluster.close`` requires of it)."""
    from distributed.core import Status

    for job in cluster.workers.values():
        if getattr(job, "job_id", None) is None:
            job.status = Status.failed
    cluster.close()


def slurm_cluster(
    spec: ClusterSpec, worker_env: Mapping[str, str], security: Any, scheduler: dict[str, Any]
) -> Any:
    """The dask-jobqueue ``SLURMCluster`` of ``spec`` (its scheduler running here with the
    ``scheduler`` options), no job submitted yet (``cluster.job_script()``: what each job
    runs); each job exports ``worker_env`` before the workflow's own prologue lines."""
    jobqueue, slurm = import_jobqueue(), spec.slurm
    try:
        return jobqueue.SLURMCluster(
            **slurm.model_dump(include={"queue", "account", "cores", "memory", "walltime"}),
            processes=slurm.cores,  # single-threaded workers, one per core
            job_extra_directives=list(slurm.job_extra_directives),
            job_script_prologue=[
                *(f"export {k}={v}" for k, v in worker_env.items()),
                *slurm.job_script_prologue,
            ],
            scheduler_options=scheduler,
            security=security,
        )
    except Exception as exc:
        raise ClusterError(f"cannot start a SLURM cluster: {type(exc).__name__}: {exc}") from exc
