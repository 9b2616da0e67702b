"""ACSF as an exportable torch graph: pair vectors → per-atom features, no numpy.

:class:`ACSFGraph` (like ``NeighborSumGraph``) computes the same numbers as ``compute``
(tested to 1e-10) from tensors only, every data-dependent size made by a tensor op, never a
Python ``int``, so ``make_fx``/``torch.export`` trace it with unbacked sizes and autograd
gives forces. Inputs and output: the registry's graph form (``DescriptorKind``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from dparallel.kernels.acsf_plan import key_index, pair_table  # the engine's pair order
from dparallel.kernels.acsf_terms import angular_factor, gaussian_cutoff
from dparallel.kernels.cutoff_types import cutoff_type_id

if TYPE_CHECKING:
    from dparallel.descriptors.acsf import ACSF

__all__ = ["ACSFGraph"]


class ACSFGraph(nn.Module):
    """n2p2 symmetry functions of every atom as one traceable graph, from ``ACSF.features``:
    radial columns per (neighbour element, radial key), angular ones per (element pair,
    (radial part, (ζ, λ))) over all triplets at once (memory O(T·K_a))."""

    pair_table: torch.Tensor  # (n_el, n_el) unordered element pair → slot (buffer)
    ang_e: torch.Tensor  # (K_a,) radial-part index of each angular column (buffer)
    ang_z: torch.Tensor  # (K_a,) angular-factor index of each angular column (buffer)

    def __init__(self, acsf: ACSF) -> None:
        super().__init__()
        self.elements = acsf.elements
        n_el = len(self.elements)
        index = {e: n for n, e in enumerate(self.elements)}
        table = pair_table(n_el)
        self.n_el, self.n_pt = n_el, n_el * (n_el + 1) // 2
        rad: list = []  # (eta, rs, (rc, cutoff id, alpha))
        ekeys: list = []  # (narrow, eta, rs, (rc, cutoff id, alpha))
        zkeys: list = []  # (zeta, lambda)
        acols: list = []  # (ekey, zkey)
        where: dict[str, list[tuple[str, int, int]]] = {}
        for e in self.elements:
            cols = []
            for f in acsf.features(e):
                cut = (float(f["rc"]), cutoff_type_id(f["cutoff"]), float(f["alpha"]))
                if f["type"] == 2:
                    k = key_index(rad, (float(f["eta"]), float(f["rs"]), cut))
                    cols.append(("rad", index[f["neighbors"][0]], k))
                else:
                    ek = key_index(ekeys, (f["type"] == 3, float(f["eta"]), float(f["rs"]), cut))
                    zk = key_index(zkeys, (float(f["zeta"]), float(f["lambda"])))
                    a, b = (index[x] for x in f["neighbors"])
                    cols.append(("ang", int(table[a, b]), key_index(acols, (ek, zk))))
            where[e] = cols
        self.rad_keys, self.e_keys, self.z_keys, self.ang_cols = rad, ekeys, zkeys, acols
        k_r, k_a = len(rad), len(acols)
        self.width = n_el * k_r + self.n_pt * k_a
        for e, cols in where.items():
            src = [
                g * k_r + k if kind == "rad" else n_el * k_r + g * k_a + k for kind, g, k in cols
            ]
            self.register_buffer(f"columns_{e}", torch.tensor(src, dtype=torch.long), False)
        self.register_buffer("pair_table", torch.tensor(table, dtype=torch.long), False)
        self.register_buffer("ang_e", torch.tensor([c[0] for c in acols], dtype=torch.long), False)
        self.register_buffer("ang_z", torch.tensor([c[1] for c in acols], dtype=torch.long), False)
        self.narrow = [k for k, key in enumerate(ekeys) if key[0]]
        self.r_rad = max((k[2][0] for k in rad), default=0.0)
        self.r_ang = max((k[3][0] for k in ekeys), default=0.0)
        self.r_cut = max(self.r_rad, self.r_ang)

    def columns(self, element: str) -> Tensor:
        """(F_e,) positions of ``element``'s features in the output of :meth:`forward`."""
        return getattr(self, f"columns_{element}")

    def forward(
        self, vectors: Tensor, pair_first: Tensor, pair_second: Tensor, species: Tensor
    ) -> Tensor:
        """Source columns (N, width): radial (N, n_el·K_r) then angular (N, n_pt·K_a)."""
        n = species.shape[0]
        dist = torch.linalg.vector_norm(vectors, dim=1)  # (P,)
        parts = []
        if self.rad_keys:
            parts.append(self._radial(vectors, dist, pair_first, pair_second, species, n))
        if self.ang_cols:
            parts.append(self._angular(vectors, dist, pair_first, pair_second, species, n))
        return parts[0] if len(parts) == 1 else torch.cat(parts, 1)

    def _radial(
        self, vectors: Tensor, dist: Tensor, first: Tensor, second: Tensor, species: Tensor, n: int
    ) -> Tensor:
        """Σ_j a_k(r_ij) per (atom, neighbour element): (N, n_el·K_r)."""
        keep = torch.nonzero(dist.detach() < self.r_rad).squeeze(1)  # (P_r,)
        r = dist.index_select(0, keep)
        k = self.rad_keys
        a, _ = gaussian_cutoff(r, [x[0] for x in k], [x[1] for x in k], [x[2] for x in k])
        slot = first.index_select(0, keep) * self.n_el + species.index_select(
            0, second.index_select(0, keep)
        )
        acc = a.new_zeros(n * self.n_el, len(k)).index_add(0, slot, a)  # (N·n_el, K_r)
        return acc.view(n, self.n_el * len(k))

    def _angular(
        self, vectors: Tensor, dist: Tensor, first: Tensor, second: Tensor, species: Tensor, n: int
    ) -> Tensor:
        """Σ_{j<k} over triplets per (atom, element pair): (N, n_pt·K_a)."""
        keep = torch.nonzero(dist.detach() < self.r_ang).squeeze(1)  # (P_a,)
        centre = first.index_select(0, keep)
        centre, order = torch.sort(centre, stable=True)  # triplets need pairs by centre
        keep = keep.index_select(0, order)
        vec = vectors.index_select(0, keep)  # (P_a, 3)
        r = dist.index_select(0, keep)
        el = species.index_select(0, second.index_select(0, keep))  # (P_a,)
        # pair p leads triplets (p, q) with the later pairs q of its centre
        count = torch.zeros(n, dtype=torch.long, device=centre.device)
        end = torch.cumsum(count.index_add(0, centre, torch.ones_like(centre)), 0)  # (N,)
        p = torch.arange(centre.shape[0], device=centre.device)
        lead = end.index_select(0, centre) - p - 1  # (P_a,) triplets led by p
        tj = torch.repeat_interleave(p, lead)  # (T,)
        offs = torch.cumsum(lead, 0) - lead
        tk = tj + 1 + (torch.arange(tj.shape[0], device=tj.device) - offs.index_select(0, tj))
        vj, vk = vec.index_select(0, tj), vec.index_select(0, tk)  # (T, 3)
        rj, rk = r.index_select(0, tj), r.index_select(0, tk)  # (T,)
        cos = (vj * vk).sum(1) / (rj * rk)  # (T,)
        ek = self.e_keys
        a, _ = gaussian_cutoff(r, [x[1] for x in ek], [x[2] for x in ek], [x[3] for x in ek])
        radial = a.index_select(0, tj) * a.index_select(0, tk)  # (T, n_E)
        if self.narrow:
            nk = [ek[i] for i in self.narrow]
            rjk = torch.linalg.vector_norm(vk - vj, dim=1)  # (T,)
            b, _ = gaussian_cutoff(rjk, [x[1] for x in nk], [x[2] for x in nk], [x[3] for x in nk])
            ones = torch.ones_like(radial)
            idx = torch.tensor(self.narrow, dtype=torch.long, device=ones.device)
            radial = radial * ones.index_copy(1, idx, b)
        zk = self.z_keys
        z, _ = angular_factor(cos, [x[0] for x in zk], [x[1] for x in zk])  # (T, n_Z)
        terms = radial.index_select(1, self.ang_e) * z.index_select(1, self.ang_z)  # (T, K_a)
        slot = (
            centre.index_select(0, tj) * self.n_pt
            + self.pair_table[el.index_select(0, tj), el.index_select(0, tk)]
        )
        acc = terms.new_zeros(n * self.n_pt, len(self.ang_cols)).index_add(0, slot, terms)
        return acc.view(n, self.n_pt * len(self.ang_cols))
