"""dparallel.kernels: pure torch kernels (neighbor sums, ACSF terms) with fast backends."""

from dparallel.kernels.acsf_terms import (
    angular_factor,
    gaussian_cutoff,
    triplet_blocks,
    triplet_counts,
    triplets,
)
from dparallel.kernels.cutoffs import (
    CUTOFF_TYPES,
    cutoff_fn,
    cutoff_fn_and_derivative,
    cutoff_type_id,
)
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
    "CUTOFF_TYPES",
    "angular_factor",
    "available_backends",
    "cutoff_fn",
    "cutoff_fn_and_derivative",
    "cutoff_type_id",
    "envsum",
    "featsum",
    "gaussian_cutoff",
    "get_backend",
    "sensesum",
    "set_backend",
    "triplet_blocks",
    "triplet_counts",
    "triplets",
    "use_backend",
    "warm_up",
]
