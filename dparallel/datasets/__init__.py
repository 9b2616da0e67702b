"""Small generated datasets for demos and tests (no download needed)."""

from dparallel.datasets.emt_cu import generate_emt_cu, write_emt_cu
from dparallel.datasets.molecules import generate_emt_molecules, write_emt_molecules

__all__ = ["generate_emt_cu", "generate_emt_molecules", "write_emt_cu", "write_emt_molecules"]
