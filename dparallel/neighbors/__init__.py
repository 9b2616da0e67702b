"""dparallel.neighbors: full pair lists for structure batches (see docs/acsf.md)."""

from dparallel.neighbors._vesin import Neighbors, in_centre_order, neighbor_list, select_structures
from dparallel.neighbors.coincident import COINCIDENT_DISTANCE, coincident_atoms, refuse_coincident

__all__ = [
    "COINCIDENT_DISTANCE",
    "Neighbors",
    "coincident_atoms",
    "in_centre_order",
    "neighbor_list",
    "refuse_coincident",
    "select_structures",
]
