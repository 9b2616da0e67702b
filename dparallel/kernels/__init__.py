"""dparallel.kernels: pure torch kernels (neighbor sums, ACSF terms) with fast backends."""

from dparallel.kernels.neighbor_sums import (
    available_backends,
    envsum,
    featsum,
    get_backend,
    sensesum,
    set_backend,
    use_backend,
    warm_up,
)

__all__ = [
    "available_backends",
    "envsum",
    "featsum",
    "get_backend",
    "sensesum",
    "set_backend",
    "use_backend",
    "warm_up",
]
