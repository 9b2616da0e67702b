"""dparallel: featurize atomic structures in parallel into zarr and train potentials from it.

``StructureBatch`` loads on first use (PEP 562): the command line starts its workers'
warm server before anything imports numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dparallel._lazy import lazy_getattr
from dparallel.errors import DParallelError

if TYPE_CHECKING:
    from dparallel.types import StructureBatch

__version__ = "0.1.0"

__all__ = ["DParallelError", "StructureBatch", "__version__"]

__getattr__ = lazy_getattr(__name__, {"StructureBatch": "types"})
