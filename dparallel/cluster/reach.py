"""What a cluster's workers can reach of the locations a run names."""

from __future__ import annotations

from typing import Any

from dparallel.io.location import LocationError, Where, as_location

__all__ = ["refuse_process_local"]


def refuse_process_local(client: Any, *locations: Where) -> None:
    """Raise :class:`~dparallel.io.location.LocationError` for a ``memory://`` location (it
    lives in this process alone) when the cluster's workers are other processes (its
    scheduler is not ``inproc://``): each would find an empty store of its own, or no
    input."""
    address = str(getattr(getattr(client, "scheduler", None), "address", "") or "")
    if address.startswith("inproc://"):
        return
    for where in locations:
        location = as_location(where)
        if location.protocol == "memory":
            raise LocationError(
                f"{location}: a memory:// location lives in this process alone, and the "
                f"cluster's workers ({address or 'its scheduler'}) are other processes: use "
                "a folder they share or an object store (s3://, az://)"
            )
