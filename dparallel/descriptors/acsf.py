"""n2p2-compatible atom-centred symmetry functions (types 2, 3, 9) with analytic derivatives.

See docs/acsf.md for formulas, feature order, metadata and the derivative layout.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.descriptors.acsf_functions import _feature, _refuse_duplicates
from dparallel.descriptors.results import ACSFResult, PairDerivatives
from dparallel.errors import DescriptorError
from dparallel.neighbors import Neighbors, neighbor_list
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import torch

    from dparallel.descriptors._acsf_engine import ElementPlan

__all__ = ["ACSF", "ACSFResult", "PairDerivatives"]

_FEATURE_KEYS = ("type", "center", "neighbors", "eta", "rs", "zeta", "lambda", "rc", "cutoff")


def length_unit(unit: float | str) -> float:
    """Å per file length unit: a positive factor or a unit-system name (``dparallel.io.UNITS``)."""
    if isinstance(unit, str):
        from dparallel.io.source import UNITS

        if unit not in UNITS:
            raise DescriptorError(f"unknown units {unit!r}; expected one of {sorted(UNITS)}")
        return UNITS[unit][0]
    if not (math.isfinite(unit) and unit > 0):
        raise DescriptorError(f"length unit must be a positive factor (Å per unit), got {unit}")
    return float(unit)


class ACSF:
    """A set of n2p2 symmetry functions per central element.

    Build with :meth:`uniform`, :meth:`from_dict` or, from an n2p2 input.nn,
    :func:`dparallel.n2p2.acsf_from_input_nn`. Picklable;
    ``to_dict()`` is JSON-able.

    ``order`` says how each central element's columns are ordered: ``"given"`` keeps the
    order of ``features`` (:meth:`uniform`'s order, or a file's), ``"n2p2"`` sorts them as
    n2p2 does (``Element::sortSymmetryFunctions``, see :meth:`n2p2_order`), so columns,
    statistics and ``scaling.data`` rows all follow n2p2's order.
    """

    ORDERS = ("given", "n2p2")

    def __init__(
        self, elements: Sequence[str], features: dict[str, list[dict]], order: str = "given"
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
                feats.append(
                    _feature(
                        int(f["type"]),
                        e,
                        nb,
                        f["eta"],
                        f.get("rs", 0.0) or 0.0,
                        f["rc"],
                        f.get("cutoff", "cos"),
                        f.get("alpha", 0.0) or 0.0,
                        f.get("zeta"),
                        f.get("lambda"),
                    )
                )
            _refuse_duplicates(e, feats)
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
        feats: dict[str, list[dict]] = {}
        for e in elements:
            out = []
            for f in elements:
                for eta, rs in radial:
                    out.append(_feature(2, e, [f], eta, rs, r_cut, cutoff, alpha))
            for ia, a in enumerate(elements):
                for b in elements[ia:]:
                    for type_, params in ((3, narrow), (9, wide)):
                        for eta, zeta, lam, rs in params:
                            out.append(
                                _feature(type_, e, [a, b], eta, rs, r_cut, cutoff, alpha, zeta, lam)
                            )
            feats[e] = out
        return cls(elements, feats)

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> ACSF:
        """Rebuild from :meth:`to_dict` output (specs without ``order`` are ``"given"``)."""
        if not isinstance(spec, dict) or spec.get("kind") != "acsf":
            raise DescriptorError("ACSF.from_dict: expected a dict with kind='acsf'")
        return cls(spec["elements"], spec["features"], order=spec.get("order", "given"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able spec (kind, elements, features per central element)."""
        return {
            "kind": "acsf",
            "version": 1,
            "elements": list(self._elements),
            "order": self._order,
            "features": {e: [self._public(f) for f in fs] for e, fs in self._features.items()},
        }

    def __getstate__(self) -> dict[str, Any]:
        return self.to_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["elements"], state["features"], order=state.get("order", "given")
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
        """Column indices of ``element``'s features in the order n2p2 sorts them.

        n2p2 sorts each element's functions by type, cutoff type, α, rc, η, rs, ζ, λ and
        neighbour elements (by atomic number); ``scaling.data`` rows and the network's
        inputs follow that order. Identity when ``order == "n2p2"``.
        """
        from dparallel.descriptors.acsf_order import n2p2_sort_key

        self._check_element(element)
        feats = self._features[element]
        return sorted(range(len(feats)), key=lambda k: n2p2_sort_key(feats[k], self._z))

    @property
    def r_cut(self) -> float:
        """Largest cutoff radius of any feature (Å)."""
        return max((f["rc"] for fs in self._features.values() for f in fs), default=0.0)

    @staticmethod
    def _public(f: dict) -> dict[str, Any]:
        d = {k: (list(f[k]) if k == "neighbors" else f[k]) for k in _FEATURE_KEYS}
        d["alpha"] = f["alpha"]
        return d

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

    def _get_plans(self) -> dict[str, ElementPlan]:
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
        max_triplets: int = 131072,
        backend: str = "auto",
        compute_dtype: torch.dtype | None = None,
    ) -> dict[str, ACSFResult]:
        """Symmetry functions of every atom, grouped by central element.

        Parameters
        ----------
        structures
            A :class:`StructureBatch` or a list of ``ase.Atoms``.
        derivatives
            Also return analytic ∂G_i/∂r_ij per pair (``ACSFResult.pairs``).
        dtype
            torch.float64 (default) or torch.float32.
        neighbors
            A precomputed :func:`neighbor_list` of the batch with cutoff ≥ ``r_cut``.
        positions
            Optional (N, 3) tensor replacing the batch positions; values (and
            derivatives) are differentiable with respect to it (autograd, double backward).
        max_triplets
            Triplets processed per block by the torch backend (memory bound, docs/acsf.md).
        backend
            ``"torch"`` (vectorised, differentiable reference), ``"numba"`` (compiled
            triplet loop, not differentiable w.r.t. ``positions``), ``"triton"`` (the
            GPU kernel, or on CPU under ``TRITON_INTERPRET=1``; not differentiable) or
            ``"auto"``: numba when it is installed and ``positions`` does not require
            grad, else torch.
        compute_dtype
            numba backend only: precision of the per-triplet terms (default
            ``torch.float64``). ``torch.float32``
            doubles the vector width (sums stay float64; about 1e-7 relative error);
            the torch backend computes in ``dtype``.

        Returns
        -------
        dict
            element → :class:`ACSFResult`; elements absent from the batch get 0 rows.
        """
        import torch  # here, not at module level: the driver reads specs without torch

        from dparallel.descriptors._acsf_engine import evaluate_element

        dtype = torch.float64 if dtype is None else dtype
        compute_dtype = torch.float64 if compute_dtype is None else compute_dtype
        batch = (
            structures
            if isinstance(structures, StructureBatch)
            else StructureBatch.from_ase(structures)
        )
        for name, dt in (("dtype", dtype), ("compute_dtype", compute_dtype)):
            if dt not in (torch.float32, torch.float64):
                raise DescriptorError(f"{name} must be torch.float32 or torch.float64, got {dt}")
        el_index = self._element_index(batch)  # (N,)
        if neighbors is None:
            neighbors = neighbor_list(batch, self.r_cut)
        pf = torch.from_numpy(neighbors.pair_first)
        ps = torch.from_numpy(neighbors.pair_second)
        if positions is not None:
            pos = positions.to(dtype)
            if pos.shape != (batch.n_atoms, 3):
                raise DescriptorError(
                    f"positions must have shape ({batch.n_atoms}, 3), got {tuple(pos.shape)}"
                )
            cells = torch.from_numpy(batch.cells).to(dtype)
            struct = torch.from_numpy(batch.structure_index)[pf]
            shift_vec = torch.einsum(
                "pa,pab->pb", torch.from_numpy(neighbors.shifts).to(dtype), cells[struct]
            )
            vec = pos[ps] - pos[pf] + shift_vec  # (P, 3)
            dist = vec.norm(dim=1)  # (P,)
        else:
            vec = torch.from_numpy(neighbors.vectors).to(dtype)
            dist = torch.from_numpy(neighbors.distances).to(dtype)
        backend = self._resolve_backend(backend, positions)
        if backend == "numba":
            arrays = self._numba_arrays(
                el_index,
                neighbors.pair_first,
                neighbors.pair_second,
                vec.detach().numpy(),
                dist.detach().numpy(),
                derivatives,
                float32_terms=compute_dtype == torch.float32,
            )
            return {e: ACSFResult.from_numpy(a) for e, a in arrays.items()}
        el_t = torch.from_numpy(el_index)
        n_el = len(self._elements)
        plans = self._get_plans()
        out: dict[str, ACSFResult] = {}
        for e_idx, e in enumerate(self._elements):
            plan = plans[e]
            atoms = torch.nonzero(el_t == e_idx).squeeze(1)  # (n_e,) sorted
            n_e = int(atoms.shape[0])
            local = torch.full((batch.n_atoms,), -1, dtype=torch.long)
            local[atoms] = torch.arange(n_e)
            keep = torch.nonzero((el_t[pf] == e_idx) & (dist < plan.r_max)).squeeze(1)  # (P_e,)
            center = local[pf[keep]]
            args = (plan, vec[keep], dist[keep], center, el_t[ps[keep]], n_e, n_el, derivatives)
            if backend == "triton":
                from dparallel.descriptors._acsf_triton import evaluate_triton

                values, groups = evaluate_triton(*args)
            else:
                values, groups = evaluate_element(*args, max_triplets, backend, compute_dtype)
            pairs = None
            if derivatives:
                assert groups is not None
                pairs = {}
                for f_idx, f in enumerate(self._elements):
                    feat_pos = plan.deriv_groups.get(f_idx, ([], []))[0]
                    if f_idx in groups:
                        sel, dg = groups[f_idx]
                    else:
                        sel = torch.nonzero(el_t[ps[keep]] == f_idx).squeeze(1)
                        dg = vec.new_zeros((int(sel.shape[0]), 0, 3))
                    rows = keep[sel]
                    pairs[f] = PairDerivatives(
                        pair_first=pf[rows],
                        pair_second=ps[rows],
                        center=center[sel],
                        vectors=vec[rows],
                        feature_index=torch.tensor(feat_pos, dtype=torch.long),
                        dG_dr=dg,
                    )
            out[e] = ACSFResult(values=values, atom_index=atoms, pairs=pairs)
        return out

    def compute_arrays(
        self,
        batch: StructureBatch,
        derivatives: bool = False,
        neighbors: Neighbors | None = None,
        dtype: str = "float64",
        float32_terms: bool = False,
        derivative_dtype: str | None = None,
        split_derivatives: bool = False,
    ) -> dict[str, dict[str, np.ndarray]]:
        """:meth:`compute` through the compiled kernel, as numpy arrays and without torch.

        What the featurize workers call: the same numbers as ``compute(...,
        backend="numba")``, as ``{element: ACSFResult.to_numpy() arrays}``. ``dtype``:
        ``"float64"`` or ``"float32"`` (of the outputs); ``derivative_dtype``: of ``dG_dr``
        only (default ``dtype``; e.g. ``"float32"``, the store's, saves half the memory
        traffic of the derivatives); ``float32_terms`` as ``compute_dtype=torch.float32``.
        ``split_derivatives``: each ``<F>/dG_dr`` (P, F_F, 3) comes split as the store keeps
        it (docs/store-format.md): ``<F>/radial`` (F_F,) bool, which columns are radial
        (∂G/∂r_ij = s · r̂_ij), and ``<F>/dG_dr_split`` (F_r + 3 F_a, P): their s, then the
        other columns' ∂G/∂r_ij as x, y, z rows per column, as the kernel writes them.
        Needs numba (:class:`BackendUnavailableError`).
        """
        from dparallel.errors import BackendUnavailableError
        from dparallel.kernels.acsf_numba import numba_available

        if not numba_available():
            raise BackendUnavailableError("compute_arrays needs numba (pip install numba)")
        if neighbors is None:
            neighbors = neighbor_list(batch, self.r_cut)
        return self._element_arrays(
            batch, neighbors, derivatives, dtype, float32_terms, derivative_dtype, split_derivatives
        )

    def _element_arrays(
        self,
        batch: StructureBatch,
        neighbors: Neighbors,
        derivatives: bool,
        dtype: str,
        float32_terms: bool,
        derivative_dtype: str | None,
        split_derivatives: bool,
        element: Callable[..., tuple[np.ndarray, dict[int, tuple[np.ndarray, Any]] | None]]
        | None = None,
    ) -> dict[str, dict[str, np.ndarray]]:
        """:meth:`compute_arrays` (its dtype checks, then :meth:`_numba_arrays`) through
        ``element``, a kernel with ``numba_element``'s signature (default: that one)."""
        for name, value in (("dtype", dtype), ("derivative_dtype", derivative_dtype or dtype)):
            if value not in ("float64", "float32"):
                raise DescriptorError(f"{name} must be 'float64' or 'float32', got {value!r}")
        return self._numba_arrays(
            self._element_index(batch),  # (N,)
            neighbors.pair_first,
            neighbors.pair_second,
            neighbors.vectors.astype(dtype, copy=False),
            neighbors.distances.astype(dtype, copy=False),
            derivatives,
            float32_terms,
            np.dtype(derivative_dtype or dtype).type,
            split_derivatives,
            element=element,
        )

    def _numba_arrays(
        self,
        el_index: np.ndarray,
        pair_first: np.ndarray,
        pair_second: np.ndarray,
        vectors: np.ndarray,
        distances: np.ndarray,
        derivatives: bool,
        float32_terms: bool,
        derivative_dtype: type | None = None,
        split_derivatives: bool = False,
        element: Callable[..., tuple[np.ndarray, dict[int, tuple[np.ndarray, Any]] | None]]
        | None = None,
    ) -> dict[str, dict[str, np.ndarray]]:
        """Per element, ``ACSFResult.to_numpy()`` arrays from the compiled kernel.

        ``el_index`` (N,) element of each atom; pairs (P,) int64 with vectors (P, 3) and
        distances (P,) in the output dtype; ``dG_dr`` in ``derivative_dtype`` (default:
        the output dtype), split as :meth:`compute_arrays` says if ``split_derivatives``.
        ``element``: the per-element kernel (default ``numba_element``, whose signature and
        numpy results it has; e.g. the Triton kernel on a GPU).
        """
        from dparallel.descriptors._acsf_engine import SplitDerivatives, numba_element
        from dparallel.kernels.pair_select import element_pairs

        n_el = len(self._elements)
        plans = self._get_plans()
        out: dict[str, dict[str, np.ndarray]] = {}
        element_atoms = [np.flatnonzero(el_index == e_idx) for e_idx in range(n_el)]
        local = np.full(el_index.shape[0], -1, dtype=np.int64)  # (N,) row within its element
        for atoms in element_atoms:
            local[atoms] = np.arange(atoms.shape[0])
        for e_idx, e in enumerate(self._elements):
            plan = plans[e]
            atoms = element_atoms[e_idx]  # (n_e,) sorted
            keep, center, neighbor_el, e_vectors, e_distances = element_pairs(
                el_index, local, pair_first, pair_second, vectors, distances, e_idx, plan.r_max
            )  # (P_e,) pairs of centre element e in its cutoff
            values, groups = (element or numba_element)(
                plan, e_vectors, e_distances, center, neighbor_el, atoms.shape[0],
                n_el, derivatives, vectors.dtype.type, float32_terms, derivative_dtype,
                split_derivatives,
            )  # fmt: skip
            arrays = {"values": values, "atom_index": atoms}
            for f_idx, f in enumerate(self._elements if derivatives else ()):
                assert groups is not None
                d_dtype = derivative_dtype or vectors.dtype
                if f_idx in groups:
                    sel, dg = groups[f_idx]
                else:
                    sel = np.flatnonzero(neighbor_el == f_idx)
                    dg = np.zeros((sel.shape[0], 0, 3), dtype=d_dtype)
                    if split_derivatives:  # no columns: (0,), (0, P)
                        dg = SplitDerivatives(np.zeros(0, bool), dg[:, :, 0].T)
                rows = keep[sel]
                feat_pos = plan.deriv_groups.get(f_idx, ([], []))[0]
                arrays |= {
                    f"{f}/pair_first": pair_first[rows],
                    f"{f}/pair_second": pair_second[rows],
                    f"{f}/center": center[sel],
                    f"{f}/vectors": e_vectors[sel],
                    f"{f}/feature_index": np.asarray(feat_pos, dtype=np.int64),
                }
                if split_derivatives:
                    arrays |= {f"{f}/{name}": a for name, a in dg._asdict().items()}
                else:
                    arrays[f"{f}/dG_dr"] = dg
            out[e] = arrays
        return out

    @staticmethod
    def _resolve_backend(backend: str, positions: torch.Tensor | None) -> str:
        """'torch', 'numba' or 'triton' from the requested backend."""
        import torch

        from dparallel.errors import BackendUnavailableError
        from dparallel.kernels.acsf_numba import numba_available

        needs_grad = positions is not None and positions.requires_grad and torch.is_grad_enabled()
        if backend == "auto":
            return "numba" if numba_available() and not needs_grad else "torch"
        if backend == "torch":
            return backend
        if backend == "numba":
            if not numba_available():
                raise BackendUnavailableError("backend='numba' needs numba (pip install numba)")
            if needs_grad:
                raise DescriptorError(
                    "backend='numba' is not differentiable; use backend='torch' with "
                    "positions that require grad"
                )
            return backend
        if backend == "triton":  # the GPU kernel; torch is its reference
            from dparallel.descriptors._acsf_triton import check_triton

            check_triton()
            if needs_grad:
                raise DescriptorError("backend='triton' is not differentiable; use 'torch'")
            return backend
        raise DescriptorError(
            f"backend must be 'auto', 'torch', 'numba' or 'triton', got {backend!r}"
        )

    def _element_index(self, batch: StructureBatch) -> np.ndarray:
        """Index into ``elements`` of each atom (N,); error names the structure."""
        lut = np.full(119, -1, dtype=np.int64)
        for n, e in enumerate(self._elements):
            lut[self._z[e]] = n
        nums = batch.numbers
        bad = (nums < 0) | (nums > 118)
        idx = np.where(bad, -1, lut[np.clip(nums, 0, 118)])
        if np.any(idx < 0):
            row = int(np.nonzero(idx < 0)[0][0])
            s = int(np.searchsorted(batch.offsets, row, side="right") - 1)
            raise DescriptorError(
                f"structure {s}, atom {row - int(batch.offsets[s])}: atomic number "
                f"{int(nums[row])} is not among the ACSF elements {self._elements}"
            )
        return idx
