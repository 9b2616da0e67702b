"""Validated description of the Dask cluster a run uses (the workflow's ``cluster:`` section).

Pure data: nothing here connects to anything. :func:`dparallel.cluster.connect` turns a
:class:`ClusterSpec` into a running client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from dask.utils import parse_bytes
from pydantic import Field, field_validator, model_validator

from dparallel._spec import FromYaml, SpecModel

__all__ = ["ClusterSpec", "SlurmSpec", "TLSSpec"]


class TLSSpec(SpecModel):
    """Certificate files for a TLS connection (PEM)."""

    ca_file: FromYaml[Path]  # the authority that signed the scheduler's and workers' certificates
    cert: FromYaml[Path]  # this client's certificate (holding the key too when ``key`` is omitted)
    key: FromYaml[Path] | None = None  # this client's private key

    def check_files(self) -> None:
        """Raise :class:`~dparallel.errors.ClusterError` naming the first key whose file is
        not there (read before a run connects, and by ``validate``)."""
        from dparallel.errors import ClusterError

        for name in ("ca_file", "cert", "key"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ClusterError(
                    f"cluster.tls.{name}: certificate file {str(path)!r} does not exist; "
                    "give the PEM files the scheduler's CA signed"
                )


class SlurmSpec(SpecModel):
    """Options for a SLURM cluster through dask-jobqueue (``pip install dparallel[slurm]``)."""

    queue: str | None = None  # SLURM partition (-p)
    account: str | None = None  # SLURM account (-A)
    cores: int = Field(1, ge=1)  # per job, each running one single-threaded worker process
    memory: str = "4GB"  # per job
    walltime: str = Field("01:00:00", pattern=r"^(\d+-)?\d{1,3}:\d{2}(:\d{2})?$")  # HH:MM:SS
    jobs: int = Field(1, ge=1)  # jobs to submit (cluster.scale(jobs=...))
    job_extra_directives: list[str] = Field(default_factory=list)  # extra #SBATCH lines
    # shell lines run before each worker starts, after dparallel's thread exports (AWS_*…)
    job_script_prologue: list[str] = Field(default_factory=list)


class ClusterSpec(SpecModel):
    """Where the Dask work runs: ``kind`` ``local`` starts a multi-process
    :class:`distributed.LocalCluster`, ``address`` connects to a running scheduler
    (``address`` or ``scheduler_file``), ``slurm`` submits workers through dask-jobqueue.

    ``gpus``: GPU workers a local cluster starts besides its CPU workers, one per GPU with
    its own ``CUDA_VISIBLE_DEVICES`` and the Dask resource ``GPU=1``
    (:mod:`dparallel.cluster.gpus`; workers of an existing cluster advertise ``--resources
    GPU=1`` themselves). ``torch_threads``: ``torch.get_num_threads()`` inside each task
    (also OMP/MKL_NUM_THREADS of local workers); ``None``: 1 for local workers, those of
    an existing cluster keep their own ``DPARALLEL_TORCH_THREADS`` (default 1).
    ``dashboard_address``: a bare ``":PORT"`` (or port) stays on 127.0.0.1 (``":0"``: a free port);
    name a host (``"0.0.0.0:8787"``) to expose it.
    """

    kind: Literal["local", "address", "slurm"] = "local"
    n_workers: int | None = Field(None, ge=1)  # local worker processes; None: one per core
    gpus: int = Field(0, ge=0)
    threads_per_worker: int = Field(1, ge=1)  # 1: tasks run torch code, parallel by process
    torch_threads: int | None = Field(None, ge=1)
    # per local worker: "2GiB", "auto", bytes (2e9) or a fraction of memory (0.25); None: Dask's
    memory_limit: str | float | None = None
    address: str | None = None  # tcp://host:8786 or tls://host:8786
    scheduler_file: FromYaml[Path] | None = None  # written by dask scheduler --scheduler-file
    tls: TLSSpec | None = None  # certificates: the connection uses TLS (tls:// addresses)
    dashboard_address: str = "127.0.0.1:8787"
    connect_timeout: float = Field(10.0, gt=0)  # s to wait for a remote scheduler
    slurm: SlurmSpec = Field(default_factory=SlurmSpec)  # for kind="slurm"

    @field_validator("dashboard_address", mode="before")
    @classmethod
    def _dashboard_address_readable(cls, value: object) -> object:
        """``HOST:PORT``, ``:PORT`` or a bare port (Dask's forms; a port alone is
        ``:PORT``, on 127.0.0.1), checked here rather than when the cluster starts (which
        took a word for a host name: 'Name or service not known')."""
        if isinstance(value, int | str) and not isinstance(value, bool) and str(value).isdigit():
            value = f":{value}"
        if not isinstance(value, str):
            return value  # the type's own error
        host, colon, port = value.rpartition(":")
        if not colon or not port.isdigit() or int(port) > 65535 or any(c in host for c in " ,"):
            raise ValueError(
                f"dashboard_address {value!r}: give HOST:PORT or :PORT (127.0.0.1:8787; "
                "':0' for a free port; 0.0.0.0:8787 to expose it)"
            )
        return value

    @field_validator("memory_limit")
    @classmethod
    def _memory_limit_readable(cls, value: str | float | None) -> str | float | None:
        """What Dask's ``memory_limit`` takes, checked here rather than in a worker."""
        if isinstance(value, str) and value != "auto":
            try:
                parse_bytes(value)
            except ValueError:
                raise ValueError(
                    f"memory_limit {value!r} is no amount of memory: give e.g. '2GiB', "
                    "'auto', a number of bytes (2e9) or a fraction of memory (0.25)"
                ) from None
        elif isinstance(value, float) and not (0 < value <= 1 or value >= 2**20):
            raise ValueError(
                f"memory_limit {value} is neither a fraction of memory (0 < x <= 1) nor "
                "a number of bytes (at least 2**20); null: Dask's default"
            )
        return value

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
