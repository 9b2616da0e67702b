"""n2p2-compatible atom-centred symmetry functions (types 2, 3, 9) with analytic derivatives.

See docs/acsf.md for formulas, feature order, metadata and the derivative layout.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.descriptors._acsf_backends import (
    Backend,
    BatchPairs,
    KernelCall,
    element_arrays,
    resolve_backend,
)
from dparallel.descriptors.acsf_functions import feature_spec, n2p2_sort_key, refuse_duplicates
from dparallel.descriptors.results import DescriptorResult, PairDerivatives
from dparallel.descriptors.species import (
    as_batch,
    check_dtype_name,
    compute_dtype,
    species_index,
)
from dparallel.errors import DescriptorError
from dparallel.neighbors import Neighbors, in_centre_order, neighbor_list, refuse_coincident

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

    from dparallel.descriptors._acsf_engine import ElementPlan
    from dparallel.types import StructureBatch

__all__ = ["ACSF", "Backend", "DescriptorResult", "PairDerivatives"]

_FEATURE_KEYS = ("type", "center", "neighbors", "eta", "rs", "zeta", "lambda", "rc", "cutoff")


def _needs_grad(positions: torch.Tensor | None) -> bool:
    """Whether ``positions`` need gradients through the features."""
    if positions is None or not positions.requires_grad:
        return False
    import torch

    return torch.is_grad_enabled()


def length_unit(unit: float | str) -> float:
    """Å per file length unit: a positive factor or a unit-system name (``dparallel.io.units``)."""
    if isinstance(unit, str):
        from dparallel.io.units import unit_factors

        return unit_factors(unit, "length unit", DescriptorError)[0]
    if not (math.isfinite(unit) and unit > 0):
        raise DescriptorError(f"length unit must be a positive factor (Å per unit), got {unit}")
    return float(unit)


class ACSF:
    """A set of n2p2 symmetry functions per central element, built with :meth:`uniform`,
    :meth:`from_dict` or :func:`dparallel.n2p2.acsf_from_input_nn`; picklable, ``to_dict()``
    JSON-able.

    ``order``: ``"given"`` keeps the order of ``features``, ``"n2p2"`` sorts each element's
    columns as n2p2 does (:meth:`n2p2_order`), so columns, statistics and ``scaling.data``
    rows follow n2p2's order. ``lenient``: η < 0 and λ ≠ ±1 (which n2p2 accepts) are logged,
    not refused (n2p2 files, rebuilt specs).
    """

    ORDERS = ("given", "n2p2")

    def __init__(
        self,
        elements: Sequence[str],
        features: dict[str, list[dict]],
        order: str = "given",
        lenient: bool = False,
    ) -> None:
        from ase.data import atomic_numbers

        if order not in self.ORDERS:
            raise DescriptorError(f"order must be one of {self.ORDERS}, got {order!r}")
        self._order = order

        self._elements = [str(e) for e in elements]
        unknown = [e for e in self._elements if e not in atomic_numbers]
        if unknown or len(set(self._elements)) != len(self._elements):
            raise DescriptorError(f"elements must be distinct chemical symbols, got {elements}")
        self._z = {e: atomic_numbers[e] for e in self._elements}
        self._features: dict[str, list[dict]] = {}
        for e in self._elements:
            feats = []
            for f in features.get(e, []):
                nb = [str(x) for x in f["neighbors"]]
                for x in nb:
                    if x not in self._z:
                        raise DescriptorError(f"feature {f} names element {x!r} not in {elements}")
                if len(nb) == 2:  # canonical order: as in `elements`
                    nb = sorted(nb, key=self._elements.index)
                feats.append(feature_spec(e, nb, f, lenient))
            refuse_duplicates(e, feats)
            self._features[e] = feats
        if order == "n2p2":
            for e in self._elements:
                self._features[e] = [self._features[e][k] for k in self.n2p2_order(e)]
        self._plans: dict[str, ElementPlan] | None = None

    # ----------------------------------------------------------- constructors
    @classmethod
    def uniform(
        cls,
        elements: Sequence[str],
        r_cut: float = 6.0,
        cutoff: str | int = "cos",
        alpha: float = 0.0,
        radial: Sequence[tuple[float, float]] = (),
        narrow: Sequence[tuple[float, float, float, float]] = (),
        wide: Sequence[tuple[float, float, float, float]] = (),
    ) -> ACSF:
        """The same functions for every central element and neighbour element (pair).

        Order per centre: radial functions for each neighbour element (in ``elements``
        order, parameters inner), then for each unordered element pair (a ≤ b in
        ``elements`` order, a-major) its narrow (type 3) then wide (type 9) functions.
        ``radial`` holds (η, rs); ``narrow``/``wide`` hold (η, ζ, λ, rs).
        """
        elements = list(elements)
        common = {"rc": r_cut, "cutoff": cutoff, "alpha": alpha}
        feats: dict[str, list[dict]] = {}
        for e in elements:
            out = []
            for f in elements:
                for eta, rs in radial:
                    out.append({"type": 2, "neighbors": [f], "eta": eta, "rs": rs, **common})
            for ia, a in enumerate(elements):
                for b in elements[ia:]:
                    for type_, params in ((3, narrow), (9, wide)):
                        for eta, zeta, lam, rs in params:
                            out.append(
                                {"type": type_, "neighbors": [a, b], "eta": eta, "rs": rs,
                                 "zeta": zeta, "lambda": lam, **common}
                            )  # fmt: skip
            feats[e] = out
        return cls(elements, feats)

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> ACSF:
        """Rebuild from :meth:`to_dict` output (specs without ``order`` are ``"given"``;
        stores and model files written before the ``type`` key name it ``kind``)."""
        from dparallel.descriptors.registry import current_spec_keys

        spec = current_spec_keys(spec)
        if not isinstance(spec, dict) or spec.get("type") != "acsf":
            raise DescriptorError("ACSF.from_dict: expected a dict with type='acsf'")
        order = spec.get("order", "given")  # as accepted once (n2p2's η < 0, λ ≠ ±1 too)
        return cls(spec["elements"], spec["features"], order=order, lenient=True)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able spec (type, elements, features per central element)."""
        return {
            "type": "acsf",
            "version": 1,
            "elements": list(self._elements),
            "order": self._order,
            "features": {e: [self._public(f) for f in fs] for e, fs in self._features.items()},
        }

    def __getstate__(self) -> dict[str, Any]:
        return self.to_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]  # as accepted once (an input.nn's λ ≠ ±1 too)
            state["elements"], state["features"], order=state.get("order", "given"), lenient=True
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ACSF) and json.dumps(self.to_dict()) == json.dumps(other.to_dict())

    def __repr__(self) -> str:
        counts = ", ".join(f"{e}: {len(self._features[e])}" for e in self._elements)
        return (
            f"ACSF(elements={self._elements}, r_cut={self.r_cut}, n_features={{{counts}}}, "
            f"order={self._order!r})"
        )

    # ---------------------------------------------------------------- metadata
    @property
    def elements(self) -> list[str]:
        """Element symbols, in the order used for element pairs."""
        return list(self._elements)

    @property
    def order(self) -> str:
        """``"n2p2"`` (columns in n2p2's sorted order) or ``"given"``."""
        return self._order

    def n2p2_order(self, element: str) -> list[int]:
        """Column indices of ``element``'s features in n2p2's order (:func:`n2p2_sort_key`),
        which ``scaling.data`` rows and n2p2's network inputs follow; identity when
        ``order == "n2p2"``."""
        self._check_element(element)
        feats = self._features[element]
        return sorted(range(len(feats)), key=lambda k: n2p2_sort_key(feats[k], self._z))

    @property
    def r_cut(self) -> float:
        """Largest cutoff radius of any feature (Å)."""
        return max((f["rc"] for fs in self._features.values() for f in fs), default=0.0)

    @staticmethod
    def _public(f: dict) -> dict[str, Any]:
        return {k: (list(f[k]) if k == "neighbors" else f[k]) for k in (*_FEATURE_KEYS, "alpha")}

    def features(self, element: str) -> list[dict[str, Any]]:
        """Metadata of each feature of central ``element``, in column order."""
        self._check_element(element)
        return [self._public(f) for f in self._features[element]]

    def n_features(self, element: str) -> int:
        """Number of features of central ``element``."""
        self._check_element(element)
        return len(self._features[element])

    def _check_element(self, element: str) -> None:
        if element not in self._features:
            raise DescriptorError(f"element {element!r} not in this ACSF ({self._elements})")

    def plans(self) -> dict[str, ElementPlan]:
        from dparallel.descriptors._acsf_engine import build_plan  # torch: workers only

        if self._plans is None:
            self._plans = {e: build_plan(self._features[e], self._elements) for e in self._elements}
        return self._plans

    # ----------------------------------------------------------------- compute
    def compute(
        self,
        structures: StructureBatch | Sequence[Any],
        derivatives: bool = False,
        dtype: torch.dtype | None = None,
        neighbors: Neighbors | None = None,
        positions: torch.Tensor | None = None,
        backend: str | Backend = "auto",
    ) -> dict[str, DescriptorResult]:
        """Symmetry functions of every atom, grouped by central element.

        Parameters
        ----------
        structures
            A :class:`StructureBatch`, an ``ase.Atoms`` or a list of them.
        derivatives
            Also return analytic ∂G_i/∂r_ij per pair (``DescriptorResult.pairs``).
        dtype
            torch.float64 (default) or torch.float32.
        neighbors
            A precomputed :func:`neighbor_list` of the batch with cutoff ≥ ``r_cut`` (pairs
            in any order).
        positions
            Optional (N, 3) tensor replacing the batch positions; values (and
            derivatives) are differentiable with respect to it (autograd, double backward).
        backend
            ``"auto"``, ``"torch"``, ``"numba"``, ``"triton"`` or a :class:`Backend` with
            options (see there); only torch is differentiable with respect to ``positions``.

        Returns
        -------
        dict
            element → :class:`DescriptorResult`; elements absent from the batch get 0 rows.
        """
        dtype = compute_dtype(dtype)
        batch = as_batch(structures)
        chosen = resolve_backend(backend, _needs_grad(positions))
        neighbors = (
            neighbor_list(batch, self.r_cut) if neighbors is None else in_centre_order(neighbors)
        )
        # every engine would divide by zero there (and give NaN, each its own way)
        refuse_coincident(batch, neighbors.pair_first, neighbors.pair_second, neighbors.distances)
        vec, dist = self._pair_geometry(batch, neighbors, dtype, positions)
        pairs = BatchPairs(
            self.element_index(batch),  # (N,)
            neighbors.pair_first,
            neighbors.pair_second,
            vec.detach().numpy(),
            dist.detach().numpy(),
            None if chosen.name == "numba" else (vec, dist),  # torch in and out
        )
        arrays = element_arrays(
            self._elements, self.plans(), pairs, KernelCall(derivatives, backend=chosen)
        )
        return {e: DescriptorResult.from_numpy(a) for e, a in arrays.items()}

    @staticmethod
    def _pair_geometry(
        batch: StructureBatch,
        neighbors: Neighbors,
        dtype: torch.dtype,
        positions: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pair vectors (P, 3) and distances (P,) in ``dtype``: the list's, or from
        ``positions`` (N, 3), differentiably."""
        import torch

        if positions is None:
            vec = torch.from_numpy(neighbors.vectors).to(dtype)
            return vec, torch.from_numpy(neighbors.distances).to(dtype)
        pos = positions.to(dtype)
        if pos.shape != (batch.n_atoms, 3):
            raise DescriptorError(
                f"positions must have shape ({batch.n_atoms}, 3), got {tuple(pos.shape)}"
            )
        pf = torch.from_numpy(neighbors.pair_first)
        ps = torch.from_numpy(neighbors.pair_second)
        cells = torch.from_numpy(batch.cells).to(dtype)
        struct = torch.from_numpy(batch.structure_index)[pf]
        shift_vec = torch.einsum(
            "pa,pab->pb", torch.from_numpy(neighbors.shifts).to(dtype), cells[struct]
        )
        vec = pos[ps] - pos[pf] + shift_vec  # (P, 3)
        return vec, vec.norm(dim=1)  # (P,)

    def compute_arrays(
        self,
        batch: StructureBatch,
        derivatives: bool = False,
        neighbors: Neighbors | None = None,
        dtype: str = "float64",
        derivative_dtype: str | None = None,
        split_derivatives: bool = False,
        backend: str | Backend = "numba",
    ) -> dict[str, dict[str, np.ndarray]]:
        """:meth:`compute` through a numpy kernel, as numpy arrays and without torch.

        What the featurize workers call: ``{element: DescriptorResult.to_numpy() arrays}``.
        ``dtype`` (``"float64"`` or ``"float32"``) of the outputs, ``derivative_dtype`` of
        ``dG_dr`` only (default ``dtype``). ``split_derivatives``: each ``<F>/dG_dr`` comes
        as the store keeps it (docs/store-format.md), ``<F>/radial`` (F_F,) bool (radial
        columns, ∂G/∂r_ij = s · r̂_ij) and ``<F>/dG_dr_split`` (F_r + 3 F_a, P).
        ``backend``: ``"numba"`` or ``"triton"`` (the same arrays to float64 rounding), or
        a :class:`Backend` of either; :class:`BackendUnavailableError` if it cannot run here.
        """
        chosen = Backend.of(backend)
        if chosen.name not in ("numba", "triton"):
            raise DescriptorError(f"compute_arrays runs numba or triton, not {chosen.name!r}")
        chosen = resolve_backend(chosen)
        check_dtype_name(dtype)
        check_dtype_name(derivative_dtype or dtype, "derivative_dtype")
        neighbors = (
            neighbor_list(batch, self.r_cut) if neighbors is None else in_centre_order(neighbors)
        )
        call = KernelCall(
            derivatives, np.dtype(dtype).type, np.dtype(derivative_dtype or dtype).type,
            split_derivatives, chosen,
        )  # fmt: skip
        pairs = BatchPairs(
            self.element_index(batch),  # (N,)
            neighbors.pair_first,
            neighbors.pair_second,
            neighbors.vectors.astype(dtype, copy=False),
            neighbors.distances.astype(dtype, copy=False),
        )
        return element_arrays(self._elements, self.plans(), pairs, call)

    @staticmethod
    def resolve_backend(backend: str, positions: torch.Tensor | None = None) -> str:
        """'torch', 'numba' or 'triton': what :meth:`compute` runs for ``backend`` (with
        ``positions`` that require grad, only torch); an unavailable one is an error."""
        return resolve_backend(backend, _needs_grad(positions)).name

    def element_index(self, batch: StructureBatch) -> np.ndarray:
        """Index into ``elements`` of each atom (N,); error names the structure."""
        return species_index(batch, self._elements, "the ACSF elements")
