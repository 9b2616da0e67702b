"""The descriptors a featurization run computes, as one picklable, JSON-able object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from dparallel.descriptors.acsf import ACSF
from dparallel.errors import DescriptorError
from dparallel.neighbors import Neighbors, neighbor_list

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np

    from dparallel.descriptors.neighbor_sum import NeighborSum
    from dparallel.types import StructureBatch

__all__ = ["DESCRIPTOR_NAMES", "DescriptorSet"]

#: Names under which descriptors are stored (``features/<name>/…`` in a store).
DESCRIPTOR_NAMES = ("acsf", "neighbor_sum")

#: Supported ``dtype`` names (torch dtypes of the same name; torch is imported only to
#: compute, so a driver that only reads specs never loads it).
_DTYPES = ("float64", "float32")


@dataclass(frozen=True, eq=False)
class DescriptorSet:
    """ACSF and/or NeighborSum, whether to compute per-pair derivatives, and the dtype."""

    acsf: ACSF | None = None
    neighbor_sum: NeighborSum | None = None
    derivatives: bool = False
    dtype: Literal["float64", "float32"] = "float64"

    def __post_init__(self) -> None:
        if self.acsf is None and self.neighbor_sum is None:
            raise DescriptorError("a descriptor set needs ACSF, NeighborSum or both; got neither")
        if self.dtype not in _DTYPES:
            raise DescriptorError(f"dtype must be 'float64' or 'float32', got {self.dtype!r}")

    @property
    def r_cut(self) -> float:
        """Largest cutoff of the set (Å): one neighbor list serves every descriptor."""
        return max(d.r_cut for d in self.descriptors().values())

    def descriptors(self) -> dict[str, Any]:
        """Name → descriptor, for those present."""
        found = {"acsf": self.acsf, "neighbor_sum": self.neighbor_sum}
        return {name: d for name, d in found.items() if d is not None}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able spec (stored in the zarr attributes; rebuilt in workers)."""
        return {
            "acsf": None if self.acsf is None else self.acsf.to_dict(),
            "neighbor_sum": None if self.neighbor_sum is None else self.neighbor_sum.to_dict(),
            "derivatives": bool(self.derivatives),
            "dtype": self.dtype,
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> DescriptorSet:
        """Inverse of :meth:`to_dict`."""
        neighbor_sum = None
        if data.get("neighbor_sum") is not None:
            from dparallel.descriptors.neighbor_sum import NeighborSum  # a torch module

            neighbor_sum = NeighborSum.from_dict(data["neighbor_sum"])
        return DescriptorSet(
            acsf=None if data.get("acsf") is None else ACSF.from_dict(data["acsf"]),
            neighbor_sum=neighbor_sum,
            derivatives=bool(data.get("derivatives", False)),
            dtype=data.get("dtype", "float64"),
        )

    def compute(
        self,
        batch: StructureBatch,
        neighbors: Neighbors | None = None,
        derivative_dtype: str | None = None,
        split_derivatives: bool = False,
    ) -> dict[str, dict[str, dict[str, np.ndarray]]]:
        """Flat numpy arrays per descriptor and central element, ready to store.

        Returns ``{name: {element: arrays}}`` where ``arrays`` holds ``values (n_e, F_e)``,
        ``atom_index (n_e,)`` and, with derivatives, ``d/<F>/{pair_first, pair_second,
        center, vectors, feature_index, dG_dr}`` for each neighbour element F
        (docs/store-format.md). One neighbor list (largest cutoff) serves every descriptor.
        ``derivative_dtype`` (e.g. ``"float32"``, what the store keeps): ACSF's ``dG_dr``
        through the compiled kernel is written in it directly (default: ``self.dtype``).
        ``split_derivatives``: ACSF's ``dG_dr`` through the compiled kernel comes in the store's
        split layout instead (``radial``, ``dG_dr_split``; see
        :meth:`ACSF.compute_arrays`); other descriptors keep ``dG_dr``.
        """
        if neighbors is None:
            neighbors = neighbor_list(batch, self.r_cut)
        out: dict[str, dict[str, dict[str, np.ndarray]]] = {}
        for name, descriptor in self.descriptors().items():
            within = _within(neighbors, descriptor.r_cut)
            if name == "acsf" and not self.uses_torch:
                arrays = descriptor.compute_arrays(
                    batch,
                    derivatives=self.derivatives,
                    neighbors=within,
                    dtype=self.dtype,
                    derivative_dtype=derivative_dtype,
                    split_derivatives=split_derivatives,
                )
            else:
                import torch

                result = descriptor.compute(
                    batch,
                    derivatives=self.derivatives,
                    neighbors=within,
                    dtype=getattr(torch, self.dtype),
                )
                arrays = {element: r.to_numpy() for element, r in result.items()}
            out[name] = {element: _flatten(a) for element, a in arrays.items()}
        return out

    @property
    def uses_torch(self) -> bool:
        """Whether :meth:`compute` needs torch: for neighbor sums, or ACSF without numba
        (ACSF through the compiled kernel runs on numpy alone: workers skip torch's import)."""
        from dparallel.kernels.acsf_numba import numba_available

        return self.neighbor_sum is not None or not numba_available()


def _within(neighbors: Neighbors, r_cut: float) -> Neighbors:
    """The pairs closer than ``r_cut`` (order kept)."""
    keep = neighbors.distances < r_cut
    if bool(keep.all()):
        return neighbors
    return Neighbors(*(field[keep] for field in neighbors))


def _flatten(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Store arrays of one element's ``ACSFResult.to_numpy()``: derivative blocks go
    under ``d/<F>/``."""
    return {(key if "/" not in key else f"d/{key}"): value for key, value in arrays.items()}
