"""dparallel.neighbors: full pair lists for structure batches (see docs/acsf.md)."""

from dparallel.neighbors._vesin import Neighbors, in_centre_order, neighbor_list

__all__ = ["Neighbors", "in_centre_order", "neighbor_list"]
