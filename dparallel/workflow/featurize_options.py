"""The options of one featurize run, as one frozen object passed through the driver."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import os
    from collections.abc import Callable
    from concurrent.futures import Future

    from dparallel.cluster import ClusterHandle

__all__ = ["FeaturizeOptions"]


@dataclass(frozen=True)
class FeaturizeOptions:
    """How :func:`dparallel.workflow.featurize.featurize` reads, stores and runs.

    The fields are :func:`~dparallel.workflow.featurize.featurize`'s keyword arguments
    (documented there): how to read the source (``format``, ``units``, ``on_error``), how
    to partition and guard the store (``partition_atoms``, ``overwrite``, ``protect``),
    where to run (``client``, ``cluster``, ``scheduler``, ``scheduler_file``,
    ``connecting``), how tasks run (``torch_threads``, ``retries``) and whom to tell
    (``progress``, ``on_connect``).
    """

    format: str | None = None
    units: str = "ase"
    on_error: Literal["raise", "skip"] = "raise"
    partition_atoms: int | None = None
    overwrite: bool = False
    protect: tuple[str | os.PathLike[str], ...] = ()
    client: Any = None
    cluster: Any = None
    scheduler: str | None = None
    scheduler_file: str | os.PathLike[str] | None = None
    torch_threads: int | None = None
    retries: int = 1
    progress: Callable[[dict[str, Any], int, int], None] | None = field(default=None, compare=False)
    on_connect: Callable[[Any], None] | None = field(default=None, compare=False)
    connecting: Future[ClusterHandle] | None = field(default=None, compare=False)

    def connect_to(self) -> dict[str, Any]:
        """Keyword arguments for :func:`dparallel.cluster.connect` (and
        :func:`~dparallel.cluster.expected_workers`): where to run."""
        return {
            "spec": self.cluster,
            "client": self.client,
            "scheduler": self.scheduler,
            "scheduler_file": self.scheduler_file,
        }
