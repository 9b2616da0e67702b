"""dparallel.kernels: pure torch kernels (neighbor sums, ACSF terms) with fast backends.

Names are loaded on first use (PEP 562): importing a torch-free submodule such as
:mod:`dparallel.kernels.cutoff_types` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dparallel._lazy import lazy_getattr

if TYPE_CHECKING:
    from dparallel.kernels.acsf_terms import (
        angular_factor,
        gaussian_cutoff,
        triplet_blocks,
        triplet_counts,
        triplets,
    )
    from dparallel.kernels.cutoff_types import CUTOFF_TYPES, cutoff_type_id
    from dparallel.kernels.cutoffs import cutoff_fn, cutoff_fn_and_derivative
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

_MODULE_OF = {
    "angular_factor": "acsf_terms",
    "gaussian_cutoff": "acsf_terms",
    "triplet_blocks": "acsf_terms",
    "triplet_counts": "acsf_terms",
    "triplets": "acsf_terms",
    "CUTOFF_TYPES": "cutoff_types",
    "cutoff_type_id": "cutoff_types",
    "cutoff_fn": "cutoffs",
    "cutoff_fn_and_derivative": "cutoffs",
    "available_backends": "neighbor_sums",
    "envsum": "neighbor_sums",
    "featsum": "neighbor_sums",
    "get_backend": "neighbor_sums",
    "sensesum": "neighbor_sums",
    "set_backend": "neighbor_sums",
    "use_backend": "neighbor_sums",
    "warm_up": "neighbor_sums",
}

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

__getattr__ = lazy_getattr(__name__, _MODULE_OF)
