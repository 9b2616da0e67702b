"""Energy, forces and virial of an ACSF potential through the compiled kernels (inference).

The path :meth:`dparallel.train.export.DeployedModel.predict` takes when the ACSF backend
is numba: per central element one kernel call on numpy arrays (values and per-pair
∂G/∂r_ij), the atomic networks and ∂E/∂G by torch autograd, then one compiled pass that
contracts ∂E/∂G with ∂G/∂r_ij into forces and virial (:mod:`dparallel.kernels.pair_forces`).
Per neighbour list (a Verlet list keeps its pairs for many MD steps) the element
bookkeeping — which pairs belong to which central element, local rows, neighbour
elements — is computed once and reused; per call only the pairs inside the cutoff are
selected. Same numbers as the torch route (tested against autograd and finite
differences); no (P, F) torch temporaries, no per-call planning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from dparallel.descriptors._acsf_engine import numba_element
from dparallel.kernels.pair_forces import add_pair_forces

if TYPE_CHECKING:
    from dparallel.descriptors import ACSF
    from dparallel.neighbors import Neighbors
    from dparallel.train.model import HDNNP
    from dparallel.types import StructureBatch

__all__ = ["ACSFForces"]


class _Layout(NamedTuple):
    """Element bookkeeping of one (structure batch, neighbour list)."""

    pair_first: np.ndarray  # the neighbour list's array this layout belongs to (identity)
    numbers: np.ndarray  # (N,) atomic numbers it was made for
    atoms: list[np.ndarray]  # per element e: (n_e,) global rows, ascending
    local: np.ndarray  # (N,) row of each atom within its element
    pairs: list[np.ndarray]  # per element e: (P_e,) pairs whose centre has element e
    neighbor_el: np.ndarray  # (P,) element index of each pair's neighbour j


class ACSFForces:
    """Energies, forces and virial of (ACSF, HDNNP) with the compiled kernels.

    Parameters
    ----------
    descriptor, model
        The ACSF and the per-element networks of a :class:`DeployedModel`.
    dtype
        Precision of descriptors and networks (``torch.float64`` or ``torch.float32``);
        forces and virial are accumulated in float64.
    """

    def __init__(self, descriptor: ACSF, model: HDNNP, dtype: torch.dtype) -> None:
        self.acsf = descriptor
        self.model = model
        self.dtype = dtype
        self.elements = descriptor.elements
        plans = descriptor._get_plans()
        self.plans = [plans[e] for e in self.elements]
        n_el = len(self.elements)
        self.feature_index = [
            {f: np.asarray(p.deriv_groups[f][0], dtype=np.int64) for f in p.deriv_groups}
            for p in self.plans
        ]
        self.n_el = n_el
        self._layout: _Layout | None = None

    def layout(self, batch: StructureBatch, nb: Neighbors) -> _Layout:
        """The element bookkeeping of ``nb``: reused while the neighbour list is the same."""
        old = self._layout
        if (
            old is not None
            and old.pair_first is nb.pair_first
            and np.array_equal(old.numbers, batch.numbers)
        ):
            return old
        el = self.acsf._element_index(batch)  # (N,); names a bad atomic number
        atoms = [np.flatnonzero(el == k) for k in range(self.n_el)]
        local = np.zeros(batch.n_atoms, dtype=np.int64)
        for rows in atoms:
            local[rows] = np.arange(rows.shape[0])
        centre_el = el[nb.pair_first]
        pairs = [np.flatnonzero(centre_el == k) for k in range(self.n_el)]
        self._layout = _Layout(
            nb.pair_first, batch.numbers.copy(), atoms, local, pairs, el[nb.pair_second]
        )
        return self._layout

    def __call__(
        self, batch: StructureBatch, nb: Neighbors, forces: bool, stress: bool
    ) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
        """Outputs as :meth:`DeployedModel.predict` (``energy``, ``energies``, ``forces``)
        and the virial (S, 3, 3) eV when ``stress`` (else None)."""
        lay = self.layout(batch, nb)
        need = forces or stress
        np_dtype = np.float64 if self.dtype == torch.float64 else np.float32
        pf, ps = nb.pair_first, nb.pair_second
        per_element = []  # (element, pairs, centre rows, values, groups)
        for k, (e, plan) in enumerate(zip(self.elements, self.plans, strict=True)):
            rows = lay.atoms[k]
            if e not in self.model.elements or rows.shape[0] == 0:
                continue
            sel = lay.pairs[k]
            sel = sel[nb.distances[sel] < plan.r_max]  # (P_e,) pairs in the cutoff
            center = lay.local[pf[sel]]
            values, groups = numba_element(
                plan, nb.vectors[sel], nb.distances[sel], center, lay.neighbor_el[sel],
                rows.shape[0], self.n_el, need, np_dtype,
            )  # fmt: skip
            per_element.append((k, e, sel, center, values, groups))
        inputs = {
            e: torch.from_numpy(values).requires_grad_(need)
            for _, e, _, _, values, _ in per_element
        }
        with torch.enable_grad():
            atomic = self.model.atomic_energies(inputs)  # element → (n_e,)
            keys = list(atomic)
            total = torch.stack([atomic[e].sum() for e in keys]).sum() if keys else None
            grads = (
                torch.autograd.grad(total, [inputs[e] for e in keys])
                if need and total is not None
                else ()
            )
        sidx = batch.structure_index
        per_atom = np.zeros(batch.n_atoms, dtype=np_dtype)
        for k, e, *_ in per_element:
            per_atom[lay.atoms[k]] = atomic[e].detach().numpy()
        energy = np.bincount(sidx, weights=per_atom, minlength=batch.n_structures)
        out = {"energy": energy.astype(np_dtype), "energies": per_atom}
        if not need:
            return out, None
        grad = np.zeros((batch.n_atoms, 3))  # ∂E/∂r, eV/Å
        virial = np.zeros((batch.n_structures if stress else 0, 3, 3))
        de_dg = dict(zip(keys, grads, strict=True))
        for k, e, sel, center, _, groups in per_element:
            assert groups is not None
            g = de_dg[e].numpy()
            for f, (sub, dg) in groups.items():
                rows = sel[sub]
                add_pair_forces(
                    g, center[sub], self.feature_index[k][f], dg, pf[rows], ps[rows],
                    nb.vectors[rows], sidx, grad, virial,
                )  # fmt: skip
        if forces:
            out["forces"] = (-grad).astype(np_dtype, copy=False)
        return out, (virial if stress else None)
