"""A toy descriptor type defined outside dparallel, for the registry's end-to-end test.

``RadialSum``: per atom i and neighbour element f, G[i, f·K + k] = Σ_{j of element f}
exp(−η_k r_ij²)·f_c(r_ij) with the cosine cutoff f_c(r) = (cos(π r/r_c) + 1)/2 (smooth at
r_c: value and slope vanish). It implements only the descriptor registry's public protocol
(``elements``, ``r_cut``, ``to_dict``/``from_dict``, ``compute`` with per-pair ∂G/∂r_ij)
and a torch graph form, written here from the formula, not from dparallel's descriptors.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from dparallel.descriptors import DescriptorKind, DescriptorResult, PairDerivatives
from dparallel.descriptors.species import species_index
from dparallel.neighbors import neighbor_list

NAME = "radial_sum"


class RadialSum:
    """Σ_j exp(−η_k r²)·f_c(r) per neighbour element; K = len(etas) columns per element."""

    def __init__(self, elements: list[str], r_cut: float, etas: list[float]) -> None:
        self.elements, self.r_cut, self.etas = list(elements), float(r_cut), list(etas)

    def to_dict(self) -> dict[str, Any]:
        return {"elements": self.elements, "r_cut": self.r_cut, "etas": self.etas}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RadialSum:
        return cls(data["elements"], data["r_cut"], data["etas"])

    def terms(self, r: Tensor) -> tuple[Tensor, Tensor]:
        """Per pair (P, K): exp(−η r²)·f_c(r) and its derivative with respect to r."""
        eta = r.new_tensor(self.etas)  # (K,)
        x = math.pi / self.r_cut * r.unsqueeze(1)  # (P, 1)
        fc, dfc = 0.5 * (torch.cos(x) + 1.0), -0.5 * math.pi / self.r_cut * torch.sin(x)
        g = torch.exp(-eta * r.unsqueeze(1) ** 2)  # (P, K)
        return g * fc, g * (dfc - 2.0 * eta * r.unsqueeze(1) * fc)

    def compute(
        self,
        batch: Any,
        derivatives: bool = False,
        neighbors: Any = None,
        dtype: torch.dtype = torch.float64,
    ) -> dict[str, DescriptorResult]:
        nb = neighbors if neighbors is not None else neighbor_list(batch, self.r_cut)
        keep = np.flatnonzero(nb.distances < self.r_cut)
        pf, ps = torch.from_numpy(nb.pair_first[keep]), torch.from_numpy(nb.pair_second[keep])
        vec = torch.from_numpy(nb.vectors[keep]).to(dtype)  # (P, 3)
        r = torch.linalg.vector_norm(vec, dim=1)
        s, ds = self.terms(r)  # (P, K)
        sp = torch.from_numpy(species_index(batch, self.elements))  # (N,)
        n, n_el, k = batch.n_atoms, len(self.elements), len(self.etas)
        g = s.new_zeros(n * n_el, k).index_add(0, pf * n_el + sp[ps], s).view(n, n_el * k)
        out = {}
        for e in range(n_el):
            atoms = torch.nonzero(sp == e).squeeze(1)  # (n_e,)
            if atoms.numel() == 0:
                continue
            pairs = None
            if derivatives:
                pairs = {}
                for f, symbol in enumerate(self.elements):
                    sel = torch.nonzero((sp[pf] == e) & (sp[ps] == f)).squeeze(1)
                    unit = vec[sel] / r[sel].unsqueeze(1)  # (P_ef, 3)
                    pairs[symbol] = PairDerivatives(
                        pair_first=pf[sel],
                        pair_second=ps[sel],
                        center=torch.searchsorted(atoms, pf[sel]),
                        vectors=vec[sel],
                        feature_index=f * k + torch.arange(k),
                        dG_dr=ds[sel].unsqueeze(2) * unit.unsqueeze(1),  # (P_ef, K, 3)
                    )
            out[self.elements[e]] = DescriptorResult(g[atoms], atoms, pairs)
        return out


class RadialSumGraph(nn.Module):
    """The same sums from pair vectors, as a traceable graph (export, autograd forces)."""

    def __init__(self, descriptor: RadialSum) -> None:
        super().__init__()
        self.descriptor = descriptor
        self.elements, self.r_cut = list(descriptor.elements), descriptor.r_cut
        width = len(self.elements) * len(descriptor.etas)
        self.register_buffer("all_columns", torch.arange(width), False)

    def columns(self, element: str) -> Tensor:
        return self.all_columns  # every element has every column

    def forward(self, vectors: Tensor, first: Tensor, second: Tensor, species: Tensor) -> Tensor:
        n, n_el = species.shape[0], len(self.elements)
        dist = torch.linalg.vector_norm(vectors, dim=1)  # (P,)
        keep = torch.nonzero(dist.detach() < self.r_cut).squeeze(1)
        s, _ = self.descriptor.terms(dist.index_select(0, keep))  # (P_c, K)
        slot = first.index_select(0, keep) * n_el + species.index_select(
            0, second.index_select(0, keep)
        )
        acc = s.new_zeros(n * n_el, s.shape[1]).index_add(0, slot, s)  # (N·n_el, K)
        return acc.view(n, -1)


class RadialSumSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    elements: list[str]
    r_cut: float = Field(4.0, gt=0)
    etas: list[float] = [0.3, 0.8, 2.0]

    def build(self, context: object = None) -> RadialSum:
        return RadialSum(self.elements, self.r_cut, self.etas)


KIND = DescriptorKind(
    NAME, load=lambda: RadialSum, spec=lambda: RadialSumSpec, graph=lambda: RadialSumGraph
)
