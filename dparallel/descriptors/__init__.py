"""dparallel.descriptors (see docs/)."""

from dparallel.descriptors.acsf import ACSF, ACSFResult, PairDerivatives  # noqa: E402
from dparallel.descriptors.forces import (  # noqa: E402
    forces_from_derivatives,
    virial_from_derivatives,
)

__all__ = [
    *globals().get("__all__", []),
    "ACSF",
    "ACSFResult",
    "PairDerivatives",
    "forces_from_derivatives",
    "virial_from_derivatives",
]
