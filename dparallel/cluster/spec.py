"""Validated description of the Dask cluster a run uses (the workflow's ``cluster:`` section).

Pure data: nothing here connects to anything. :func:`dparallel.cluster.connect` turns a
:class:`ClusterSpec` into a running client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["ClusterSpec", "SlurmSpec", "TLSSpec"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TLSSpec(_Frozen):
    """Certificate files for a TLS connection (PEM).

    Attributes
    ----------
    ca_file : Path
        Certificate authority that signed the scheduler's and workers' certificates.
    cert : Path
        This client's certificate (may hold the key too when ``key`` is omitted).
    key : Path or None
        This client's private key.
    """

    ca_file: Path
    cert: Path
    key: Path | None = None


class SlurmSpec(_Frozen):
    """Options for a SLURM cluster through dask-jobqueue (``pip install dparallel[slurm]``).

    Attributes
    ----------
    queue : str or None
        SLURM partition (``-p``).
    account : str or None
        SLURM account (``-A``).
    cores : int
        Cores per job; each job runs ``cores`` single-threaded worker processes.
    memory : str
        Memory per job, e.g. ``"16GB"``.
    walltime : str
        Job time limit ``HH:MM:SS``.
    jobs : int
        Number of jobs to submit (``cluster.scale(jobs=...)``).
    job_extra_directives : list of str
        Extra ``#SBATCH`` lines.
    """

    queue: str | None = None
    account: str | None = None
    cores: int = Field(1, ge=1)
    memory: str = "4GB"
    walltime: str = Field("01:00:00", pattern=r"^(\d+-)?\d{1,3}:\d{2}(:\d{2})?$")
    jobs: int = Field(1, ge=1)
    job_extra_directives: list[str] = Field(default_factory=list)


class ClusterSpec(_Frozen):
    """Where the Dask work runs.

    Attributes
    ----------
    kind : {"local", "address", "slurm"}
        ``local`` starts a multi-process :class:`distributed.LocalCluster`, ``address``
        connects to a running scheduler, ``slurm`` submits workers through dask-jobqueue.
    n_workers : int or None
        Local worker processes; ``None`` means one per core.
    gpus : int
        GPU workers a local cluster starts besides its CPU workers: one per GPU, each
        with its own ``CUDA_VISIBLE_DEVICES`` and the Dask resource ``GPU=1``
        (:mod:`dparallel.cluster.gpus`). Workers of an existing cluster advertise
        ``--resources GPU=1`` themselves instead.
    threads_per_worker : int
        Dask threads per worker process (1: tasks run torch code, parallelism is by process).
    torch_threads : int or None
        ``torch.get_num_threads()`` inside each task (also OMP/MKL_NUM_THREADS of local
        workers). ``None``: local workers use 1; workers of an existing cluster keep their
        own ``DPARALLEL_TORCH_THREADS`` (e.g. set in docker-compose), default 1.
    memory_limit : str or None
        Per-worker memory limit for local workers, e.g. ``"2GiB"``; ``None`` = Dask's default.
    address : str or None
        Scheduler address (``tcp://host:8786`` or ``tls://host:8786``) for ``kind="address"``.
    scheduler_file : Path or None
        JSON file written by ``dask scheduler --scheduler-file`` (alternative to ``address``).
    tls : TLSSpec or None
        Certificates; when given, the connection uses TLS (``tls://`` addresses).
    dashboard_address : str
        Where a local cluster's dashboard listens; ``":0"`` picks a free port. A bare
        ``":PORT"`` stays on 127.0.0.1; name a host (``"0.0.0.0:8787"``) to expose it.
    connect_timeout : float
        Seconds to wait for a remote scheduler before raising ``ClusterError``.
    slurm : SlurmSpec
        Options for ``kind="slurm"``.
    """

    kind: Literal["local", "address", "slurm"] = "local"
    n_workers: int | None = Field(None, ge=1)
    gpus: int = Field(0, ge=0)
    threads_per_worker: int = Field(1, ge=1)
    torch_threads: int | None = Field(None, ge=1)
    memory_limit: str | None = None
    address: str | None = None
    scheduler_file: Path | None = None
    tls: TLSSpec | None = None
    dashboard_address: str = "127.0.0.1:8787"
    connect_timeout: float = Field(10.0, gt=0)
    slurm: SlurmSpec = Field(default_factory=SlurmSpec)

    @model_validator(mode="after")
    def _address_given(self) -> ClusterSpec:
        if self.kind == "address" and not (self.address or self.scheduler_file):
            raise ValueError(
                "cluster.kind is 'address' but neither cluster.address nor "
                "cluster.scheduler_file is set; give e.g. address: tcp://host:8786"
            )
        if self.gpus and self.kind != "local":
            raise ValueError(
                f"cluster.gpus starts GPU workers of a local cluster, but cluster.kind is "
                f"{self.kind!r}: start the workers of that cluster on GPUs with "
                "`dask worker --resources GPU=1` (one per GPU, docs/workflows.md)"
            )
        return self
