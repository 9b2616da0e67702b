"""A Dask client the caller passes in (a script's or a notebook's own): what dparallel's
blocking calls can use."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dparallel.errors import ClusterError

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["check_given_client", "note_unused_default_client"]

logger = logging.getLogger(__name__)


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
