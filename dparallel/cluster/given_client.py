"""A Dask client the caller passes in (a script's or a notebook's own): what dparallel's
blocking calls can use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dparallel.errors import ClusterError

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["check_given_client"]


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
