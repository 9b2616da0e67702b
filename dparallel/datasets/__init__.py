"""Small generated datasets for demos and tests (no download needed)."""

from dparallel.datasets.emt_cu import generate_emt_cu, write_emt_cu

__all__ = ["generate_emt_cu", "write_emt_cu"]
