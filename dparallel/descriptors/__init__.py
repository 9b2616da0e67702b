"""dparallel.descriptors: per-atom descriptors (ACSF, NeighborSum) built from kernels."""

from dparallel.descriptors.acsf import ACSF, ACSFResult, PairDerivatives
from dparallel.descriptors.forces import forces_from_derivatives, virial_from_derivatives
from dparallel.descriptors.neighbor_sum import NeighborSum

__all__ = [
    "ACSF",
    "ACSFResult",
    "NeighborSum",
    "PairDerivatives",
    "forces_from_derivatives",
    "virial_from_derivatives",
]
