"""dparallel.kernels (see docs/)."""

from dparallel.kernels.acsf_terms import (  # noqa: E402
    angular_factor,
    gaussian_cutoff,
    triplet_blocks,
    triplet_counts,
    triplets,
)
from dparallel.kernels.cutoffs import (  # noqa: E402
    CUTOFF_TYPES,
    cutoff_fn,
    cutoff_fn_and_derivative,
    cutoff_type_id,
)

__all__ = [
    *globals().get("__all__", []),
    "CUTOFF_TYPES",
    "angular_factor",
    "cutoff_fn",
    "cutoff_fn_and_derivative",
    "cutoff_type_id",
    "gaussian_cutoff",
    "triplet_blocks",
    "triplet_counts",
    "triplets",
]
