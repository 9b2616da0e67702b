"""The descriptors a featurization run computes, as one picklable, JSON-able object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from dparallel.descriptors.registry import descriptor_kind, registered
from dparallel.descriptors.results import store_keys
from dparallel.descriptors.species import check_dtype_name
from dparallel.errors import DescriptorError
from dparallel.neighbors import Neighbors, neighbor_list

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np

    from dparallel.types import StructureBatch

__all__ = ["DescriptorSet"]

#: Keys of :meth:`DescriptorSet.to_dict` that are not descriptor types.
_OPTIONS = ("derivatives", "dtype")


@dataclass(frozen=True, eq=False, init=False)
class DescriptorSet:
    """Descriptors by registered type name, whether to compute per-pair derivatives, and
    the dtype: ``DescriptorSet({"acsf": acsf}, derivatives=True)`` or
    ``DescriptorSet(acsf=acsf, neighbor_sum=ns)``; ``dset.acsf`` is the descriptor of that
    type (``None`` when absent). Frozen (``dataclasses.replace`` works), picklable."""

    by_name: Mapping[str, Any]
    derivatives: bool
    dtype: Literal["float64", "float32"]

    def __init__(
        self,
        by_name: Mapping[str, Any] | None = None,
        *,
        derivatives: bool = False,
        dtype: Literal["float64", "float32"] = "float64",
        **descriptors: Any,
    ) -> None:
        given = {**(by_name or {}), **descriptors}
        found = {}
        for name, descriptor in given.items():
            kind = descriptor_kind(name)  # unknown names list the registered ones
            if descriptor is None:
                continue
            if derivatives and not kind.pair_derivatives:
                raise DescriptorError(f"{name} has no per-pair derivatives; set derivatives off")
            found[name] = descriptor
        if not found:
            names = ", ".join(repr(n) for n in registered())
            raise DescriptorError(
                f"a descriptor set needs ACSF, NeighborSum or both, or another registered "
                f"type ({names}); got none"
            )
        check_dtype_name(dtype)
        order = {n: k for k, n in enumerate(registered())}
        found = dict(sorted(found.items(), key=lambda item: order[item[0]]))
        object.__setattr__(self, "by_name", found)
        object.__setattr__(self, "derivatives", bool(derivatives))
        object.__setattr__(self, "dtype", dtype)

    def __getattr__(self, name: str) -> Any:
        """The descriptor of type ``name`` (``None`` if the set has none of that type)."""
        found = self.__dict__.get("by_name")
        if found is None or name.startswith("_"):
            raise AttributeError(name)
        if name in found:
            return found[name]
        if name in registered():
            return None
        raise AttributeError(f"DescriptorSet has no attribute {name!r}")

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={d!r}" for n, d in self.by_name.items())
        return f"DescriptorSet({inner}, derivatives={self.derivatives}, dtype={self.dtype!r})"

    @property
    def r_cut(self) -> float:
        """Largest cutoff of the set (Å): one neighbor list serves every descriptor."""
        return max(d.r_cut for d in self.descriptors().values())

    def descriptors(self) -> dict[str, Any]:
        """Name → descriptor, for those present (in registration order)."""
        return dict(self.by_name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able spec (stored in the zarr attributes; rebuilt in workers): every
        registered type's ``to_dict()`` (``None`` when absent), ``derivatives``, ``dtype``."""
        out: dict[str, Any] = {}
        for name in registered():
            descriptor = self.by_name.get(name)
            out[name] = None if descriptor is None else descriptor.to_dict()
        for name, descriptor in self.by_name.items():  # a type unregistered since
            out.setdefault(name, descriptor.to_dict())
        return {**out, "derivatives": bool(self.derivatives), "dtype": self.dtype}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> DescriptorSet:
        """Inverse of :meth:`to_dict` (each type's class rebuilds its own part)."""
        found = {
            name: descriptor_kind(name).from_dict(spec)
            for name, spec in data.items()
            if name not in _OPTIONS and spec is not None
        }
        return DescriptorSet(
            found,
            derivatives=bool(data.get("derivatives", False)),
            dtype=data.get("dtype", "float64"),
        )

    def compute(
        self,
        batch: StructureBatch,
        neighbors: Neighbors | None = None,
        derivative_dtype: str | None = None,
        split_derivatives: bool = False,
        backend: Any = "numba",
    ) -> dict[str, dict[str, dict[str, np.ndarray]]]:
        """``{name: {element: arrays}}``, flat numpy arrays ready to store: ``values``,
        ``atom_index`` and, with derivatives, ``d/<F>/…`` per neighbour element F
        (docs/store-format.md), from one neighbor list (the largest cutoff).
        ``derivative_dtype`` (default ``self.dtype``), ``split_derivatives`` (the store's
        split layout) and ``backend`` (e.g. ``Backend("triton", device=…)``) go to the
        torch-free route (:meth:`ACSF.compute_arrays`); the torch route keeps ``dG_dr``.
        """
        if neighbors is None:
            neighbors = neighbor_list(batch, self.r_cut)
        out: dict[str, dict[str, dict[str, np.ndarray]]] = {}
        numpy_only = not self.uses_torch  # every type of the set has a torch-free route now
        for name, descriptor in self.descriptors().items():
            within = _within(neighbors, descriptor.r_cut)
            if numpy_only:
                arrays = descriptor.compute_arrays(
                    batch,
                    derivatives=self.derivatives,
                    neighbors=within,
                    dtype=self.dtype,
                    derivative_dtype=derivative_dtype,
                    split_derivatives=split_derivatives,
                    backend=backend,
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
            out[name] = {element: store_keys(a) for element, a in arrays.items()}
        return out

    @property
    def uses_torch(self) -> bool:
        """Whether :meth:`compute` needs torch: some type of the set has no torch-free
        route now (neighbor sums; ACSF without numba). ACSF through the compiled kernel
        runs on numpy alone: workers skip torch's import."""
        for name in self.by_name:
            numpy_route = descriptor_kind(name).numpy_route
            if numpy_route is None or not numpy_route():
                return True
        return False


def _within(neighbors: Neighbors, r_cut: float) -> Neighbors:
    """The pairs closer than ``r_cut`` (order kept)."""
    keep = neighbors.distances < r_cut
    if bool(keep.all()):
        return neighbors
    return Neighbors(*(field[keep] for field in neighbors))
