"""dparallel.descriptors: per-atom descriptors (NeighborSum, ACSF) built from kernels."""

from dparallel.descriptors.neighbor_sum import ElementFeatures, NeighborSum, PairDerivatives

__all__ = ["ElementFeatures", "NeighborSum", "PairDerivatives"]
