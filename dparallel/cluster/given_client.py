"""A Dask client the caller passes in (a script's or a notebook's own): what dparallel's
blocking calls can use."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dparallel.errors import ArgumentTypeError, ClusterError

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["check_given_client", "check_where", "note_unused_default_client"]

logger = logging.getLogger(__name__)


def check_where(spec: object, client: object) -> None:
    """An :class:`ArgumentTypeError` for a ``spec`` that is no ``ClusterSpec`` or a
    ``client`` that is no ``distributed.Client`` (a running cluster object given for
    either, a mapping, an address), saying what to give instead; a ``ClusterError`` for
    a client that cannot be used (:func:`check_given_client`)."""
    from distributed import Client

    from dparallel.cluster.spec import ClusterSpec

    if client is not None and not isinstance(client, Client):
        raise ArgumentTypeError(
            f"client is a {type(client).__name__}, not a distributed.Client: " + _instead(client)
        )
    if client is not None:
        check_given_client(client)
    if spec is not None and not isinstance(spec, ClusterSpec):
        raise ArgumentTypeError(
            f"cluster is a {type(spec).__name__}, not a dparallel.cluster.ClusterSpec: "
            + ("give ClusterSpec(**settings)" if isinstance(spec, dict) else _instead(spec))
        )


def _instead(given: object) -> str:
    """What to give in place of ``given`` to run on a cluster."""
    if isinstance(given, str):
        return f"give client=Client({given!r}), or scheduler={given!r}"
    if hasattr(given, "scheduler_address"):  # a running cluster object (LocalCluster, …)
        return "give client=Client(cluster) (or cluster.get_client()) to run on it"
    return "give client=Client(...) for a running cluster, cluster=ClusterSpec(...) to start one"


def check_given_client(client: Client) -> None:
    """A :class:`ClusterError` for a client dparallel's blocking calls cannot use: one made
    with ``asynchronous=True`` (its calls return coroutines for the caller's event loop,
    which a blocking call would hold) or one already closed."""
    if getattr(client, "asynchronous", False):
        raise ClusterError(
            "the Dask client given is asynchronous (Client(..., asynchronous=True)); "
            "dparallel's calls block until done, so give a synchronous client (Client(cluster) "
            "without asynchronous=True; it works in Jupyter too), or from a coroutine run the "
            "call in a thread with one: await asyncio.to_thread(featurize, ...)"
        )
    if getattr(client, "status", None) in ("closing", "closed"):
        raise ClusterError(
            f"the Dask client given is {client.status}; give an open client (or none: "
            "dparallel then starts its own local cluster)"
        )


def note_unused_default_client() -> bool:
    """Warn, before a local cluster of dparallel's own starts, that this process already
    has a default Dask client (a notebook's ``Client()``) that the run will not use;
    whether there was one."""
    from distributed import default_client

    try:
        client = default_client()
    except ValueError:  # none: nothing to say
        return False
    if client.status not in ("running", "connecting", "newly-created"):
        return False
    address = getattr(client.scheduler, "address", None)
    logger.warning(
        "this process has a Dask client (%s) that dparallel does not use on its own: it "
        "starts a local cluster; to run on yours, give it: FeaturizeOptions(client=client), "
        "run_workflow(..., connect_to={'client': client})",
        address,
    )
    return True
