"""dparallel.neighbors: full pair lists for structure batches (see docs/acsf.md)."""

from dparallel.neighbors._vesin import Neighbors, neighbor_list

__all__ = ["Neighbors", "neighbor_list"]
