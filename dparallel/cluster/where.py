"""Which cluster a command connects to, decided in one pure function (no I/O, no imports
of ``distributed`` or ``dask``, so the CLI can ask before it starts the forkserver).

:func:`connection_kind` is the order of :func:`dparallel.cluster.connect` (its module
docstring), and :func:`~dparallel.cluster.connect`, :func:`~dparallel.cluster.expected_workers`
and the CLI's early forkserver start all ask it, so they cannot disagree.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

from dparallel.cluster.forkserver import ENV_SCHEDULER_ADDRESS

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dparallel.cluster.spec import ClusterSpec

__all__ = ["ConnectionKind", "connection_kind"]

#: Where the client comes from: a given client, ``scheduler=`` (``--scheduler``),
#: ``scheduler_file=`` (``--scheduler-file``), the ``DASK_SCHEDULER_ADDRESS`` variable, the
#: spec's ``address`` or ``slurm`` kind, or a local cluster started here.
ConnectionKind = Literal[
    "client", "scheduler", "scheduler_file", "env", "address", "slurm", "local"
]


def connection_kind(
    spec: ClusterSpec | None = None,
    *,
    client: object = None,
    scheduler: object = None,
    scheduler_file: object = None,
    env: Mapping[str, str] | None = None,
) -> ConnectionKind:
    """Which of :data:`ConnectionKind` :func:`~dparallel.cluster.connect` with these
    arguments uses: the first that applies of ``client``, ``scheduler``,
    ``scheduler_file``, a non-empty ``DASK_SCHEDULER_ADDRESS`` in ``env`` (``None``: this
    process's environment), then ``spec.kind`` (``None``: ``"local"``).

    ``--local N`` (a local cluster by name) beats the variable because the CLI drops it
    from the environment (``cli/_options.py``); ``--scheduler``/``--scheduler-file`` and
    ``--local`` exclude each other on the command line.
    """
    if client is not None:
        return "client"
    if scheduler is not None:
        return "scheduler"
    if scheduler_file is not None:
        return "scheduler_file"
    if (os.environ if env is None else env).get(ENV_SCHEDULER_ADDRESS):
        return "env"
    return "local" if spec is None else spec.kind
