"""dparallel.descriptors: per-atom descriptors (ACSF, NeighborSum) built from kernels.

Descriptor types are looked up by name in :mod:`dparallel.descriptors.registry`. The
torch-only names (``NeighborSum``, the force helpers) load on first use (PEP 562), so
reading an ACSF spec does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dparallel._lazy import lazy_getattr
from dparallel.descriptors._acsf_backends import Backend, KernelCall, numba_element
from dparallel.descriptors.acsf import ACSF
from dparallel.descriptors.registry import (
    BuildContext,
    DescriptorKind,
    descriptor_kind,
    register,
    registered,
)
from dparallel.descriptors.results import DescriptorResult, PairDerivatives

if TYPE_CHECKING:
    from dparallel.descriptors.forces import forces_from_derivatives, virial_from_derivatives
    from dparallel.descriptors.neighbor_sum import NeighborSum

_LAZY = {
    "NeighborSum": "neighbor_sum",
    "forces_from_derivatives": "forces",
    "virial_from_derivatives": "forces",
}

__all__ = [
    "ACSF",
    "Backend",
    "BuildContext",
    "DescriptorKind",
    "DescriptorResult",
    "KernelCall",
    "NeighborSum",
    "PairDerivatives",
    "descriptor_kind",
    "forces_from_derivatives",
    "numba_element",
    "register",
    "registered",
    "virial_from_derivatives",
]

__getattr__ = lazy_getattr(__name__, _LAZY)
