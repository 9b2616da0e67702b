"""dparallel: featurize atomic structures in parallel into zarr and train potentials from it."""

from __future__ import annotations

from dparallel.errors import DParallelError
from dparallel.types import StructureBatch

__version__ = "0.1.0"

__all__ = ["DParallelError", "StructureBatch", "__version__"]
