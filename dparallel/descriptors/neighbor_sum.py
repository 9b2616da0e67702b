"""NeighborSum: HIP-NN's first interaction-layer input as a fixed per-atom descriptor.

G_i[ν, f] = envsum(s(r_ij), z)[i, ν, f] = Σ_{j of species f} s_ν(|r_ij|), with HIP-NN's
inverse-distance Gaussians (``kind="inverse"``) or plain ones (``kind="gaussian"``) times
cos²(π r / (2 r_c)); column k = ν·S + f (S elements), the same columns for every central
element. Formulas: docs/kernels.md.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from dparallel.descriptors.acsf_functions import MAX_R_CUT
from dparallel.descriptors.results import DescriptorResult, PairDerivatives
from dparallel.descriptors.species import as_batch, compute_dtype, species_index
from dparallel.errors import DescriptorError
from dparallel.kernels import envsum
from dparallel.neighbors import neighbor_list, refuse_coincident

if TYPE_CHECKING:
    from dparallel.types import StructureBatch

__all__ = ["NeighborSum", "NeighborSumGraph"]

_KINDS = ("inverse", "gaussian")
#: The constructor's arguments, as :meth:`NeighborSum.to_dict` stores them.
_FIELDS = ("elements", "r_cut", "n_sensitivities", "r_min", "r_max", "kind", "cutoff", "sigma")
_CUTOFFS = ("cos2",)


def _symbol(element: str | int) -> str:
    """Chemical symbol of a symbol or atomic number."""
    from ase.data import atomic_numbers, chemical_symbols

    if isinstance(element, str) and element in atomic_numbers:
        return element
    if isinstance(element, int | np.integer) and 0 < int(element) < len(chemical_symbols):
        return chemical_symbols[int(element)]
    raise DescriptorError(f"unknown element {element!r}; expected a symbol like 'H' or a number")


class NeighborSum(torch.nn.Module):
    """HIP-NN neighbor-sum descriptor G (N, ν·S) built on :func:`dparallel.kernels.envsum`.

    ``elements`` (symbols or atomic numbers) fix the one-hot columns; ``r_cut`` (Å) is where
    the cos² cutoff reaches 0; ``n_sensitivities`` ν radial sensitivities with centres μ
    between ``r_min`` and ``r_max`` (Å, default ``r_cut``); ``kind`` ``"inverse"`` (HIP-NN)
    or ``"gaussian"``; ``cutoff`` ``"cos2"``; ``sigma`` the width (default hippynn's
    2·r_min·ν for ``"inverse"``, the spacing of μ for ``"gaussian"``). docs/descriptors.md.
    """

    mu: Tensor  # (ν,) Å, sensitivity centres (buffer)

    def __init__(
        self,
        elements: list[str | int] | tuple[str | int, ...],
        r_cut: float,
        n_sensitivities: int = 20,
        r_min: float = 0.8,
        r_max: float | None = None,
        kind: str = "inverse",
        cutoff: str = "cos2",
        sigma: float | None = None,
    ) -> None:
        super().__init__()
        self.elements = [_symbol(e) for e in elements]
        if not self.elements or len(set(self.elements)) != len(self.elements):
            raise DescriptorError(f"elements must be non-empty and unique, got {elements!r}")
        r_max = float(r_cut if r_max is None else r_max)
        if kind not in _KINDS:
            raise DescriptorError(f"kind must be one of {_KINDS}, got {kind!r}")
        if cutoff not in _CUTOFFS:
            raise DescriptorError(f"cutoff must be one of {_CUTOFFS}, got {cutoff!r}")
        if not all(math.isfinite(x) for x in (r_cut, r_min, r_max)):
            raise DescriptorError(f"need finite r_cut, r_min, r_max, got {r_cut}, {r_min}, {r_max}")
        if r_cut > MAX_R_CUT:
            raise DescriptorError(
                f"r_cut = {r_cut:g} Å is beyond {MAX_R_CUT:g} Å: a unit mistake (lengths in Å)"
            )
        if sigma is not None and not (math.isfinite(sigma) and sigma > 0):
            raise DescriptorError(f"sigma must be a finite width > 0, got {sigma}")
        if not (0 < r_min < r_max <= r_cut) or n_sensitivities < 1:
            raise DescriptorError(
                f"need 0 < r_min < r_max <= r_cut and n_sensitivities >= 1, got r_min={r_min}, "
                f"r_max={r_max}, r_cut={r_cut}, n_sensitivities={n_sensitivities}"
            )
        self.r_cut, self.r_min, self.r_max = float(r_cut), float(r_min), r_max
        self.n_sensitivities, self.kind, self.cutoff = int(n_sensitivities), kind, cutoff
        nu = self.n_sensitivities
        if kind == "inverse":
            mu = 1.0 / torch.linspace(1.0 / r_max, 1.0 / r_min, nu, dtype=torch.float64)
            default_sigma = 2.0 * r_min * nu
        else:
            mu = torch.linspace(r_min, r_max, nu, dtype=torch.float64)
            default_sigma = (r_max - r_min) / max(nu - 1, 1)
        self.sigma = float(default_sigma if sigma is None else sigma)
        self.register_buffer("mu", mu)  # (ν,) Å

    # ------------------------------------------------------------ metadata
    @property
    def n_features(self) -> int:
        """F = ν · S."""
        return self.n_sensitivities * len(self.elements)

    def features(self, element: str | int) -> list[dict[str, Any]]:
        """Metadata of the F columns for central element ``element`` (column k = ν·S + f)."""
        center = _symbol(element)
        if center not in self.elements:
            raise DescriptorError(f"element {center!r} is not one of {self.elements}")
        return [
            {
                "type": "neighbor_sum",
                "kind": self.kind,
                "center": center,
                "neighbor": neighbor,
                "nu": n,
                "mu": float(self.mu[n]),
                "sigma": self.sigma,
                "r_min": self.r_min,
                "rc": self.r_cut,
                "cutoff": self.cutoff,
            }
            for n in range(self.n_sensitivities)
            for neighbor in self.elements
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable definition; inverse of :meth:`from_dict`."""
        fields = {k: getattr(self, k) for k in _FIELDS} | {"elements": list(self.elements)}
        return {"type": "neighbor_sum", **fields}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NeighborSum:
        """Rebuild from :meth:`to_dict` output."""
        data = dict(data)
        if data.pop("type", "neighbor_sum") != "neighbor_sum":
            raise DescriptorError(f"not a neighbor_sum definition: {data!r}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise DescriptorError(f"invalid neighbor_sum definition {data!r}: {exc}") from exc

    # ------------------------------------------------------------ maths
    def sensitivities(self, r: Tensor, derivative: bool = False) -> tuple[Tensor, Tensor | None]:
        """s_ν(r) (P, ν) and, if asked, ds_ν/dr (P, ν) for distances r (P,) in Å."""
        mu = self.mu.to(r.dtype)  # (ν,)
        d = r.unsqueeze(1)  # (P, 1)
        inside = (d < self.r_cut).to(r.dtype)
        arg = math.pi / (2.0 * self.r_cut) * d
        fc = torch.cos(arg) ** 2 * inside  # (P, 1)
        if self.kind == "inverse":
            x = 1.0 / d - 1.0 / mu  # (P, ν)
            base = torch.exp(-0.5 * self.sigma**2 * x**2)
            dbase = base * (self.sigma**2 * x / d**2)
        else:
            x = d - mu
            base = torch.exp(-0.5 * x**2 / self.sigma**2)
            dbase = base * (-x / self.sigma**2)
        s = base * fc
        if not derivative:
            return s, None
        dfc = -(math.pi / (2.0 * self.r_cut)) * torch.sin(2.0 * arg) * inside  # (P, 1)
        return s, dbase * fc + base * dfc

    def forward(
        self, species: Tensor, pair_first: Tensor, pair_second: Tensor, vectors: Tensor
    ) -> Tensor:
        """G (N, ν·S) of atoms ``species`` (N,) (index into ``elements``) and pairs
        ``pair_first``/``pair_second`` (P,) with ``vectors`` (P, 3) r_ij (Å), differentiable
        in ``vectors``."""
        onehot = torch.nn.functional.one_hot(species, len(self.elements)).to(vectors.dtype)
        s, _ = self.sensitivities(torch.linalg.norm(vectors, dim=1))  # (P, ν)
        env = envsum(s, onehot, pair_first, pair_second)  # (N, ν, S)
        return env.reshape(species.shape[0], self.n_features)

    # ------------------------------------------------------------ batches
    def compute(
        self,
        structures: StructureBatch | Any,
        derivatives: bool = False,
        neighbors: Any = None,
        dtype: torch.dtype = torch.float64,
    ) -> dict[str, DescriptorResult]:
        """Symbol → :class:`~dparallel.descriptors.DescriptorResult` (torch, ACSF's layout)
        of every central element present in ``structures`` (a :class:`StructureBatch`, an
        ``ase.Atoms`` or a list of them), with ∂G_i/∂r_ij blocks if ``derivatives``.
        ``neighbors``: the batch's full pair list, ``(pair_first, pair_second, vectors)`` or
        a :class:`~dparallel.neighbors.Neighbors` (default: computed with ``r_cut``);
        ``dtype``: float64 or float32."""
        dtype = compute_dtype(dtype)
        batch = as_batch(structures)
        species = species_index(batch, self.elements)
        if neighbors is None:
            neighbors = neighbor_list(batch, self.r_cut)
        pf, ps, vec = _unpack(neighbors)
        vec_t = torch.as_tensor(vec, dtype=dtype)  # (P, 3)
        r = torch.linalg.norm(vec_t, dim=1)  # (P,)
        keep = r < self.r_cut
        refuse_coincident(batch, np.asarray(pf), np.asarray(ps), r.masked_fill(~keep, np.inf))
        pf_t = torch.as_tensor(pf, dtype=torch.int64)[keep]
        ps_t = torch.as_tensor(ps, dtype=torch.int64)[keep]
        vec_t, r = vec_t[keep], r[keep]
        sp = torch.as_tensor(species)
        s, ds = self.sensitivities(r, derivative=derivatives)  # (P, ν)
        onehot = torch.nn.functional.one_hot(sp, len(self.elements)).to(dtype)  # (N, S)
        with torch.no_grad():
            g = envsum(s, onehot, pf_t, ps_t).reshape(len(species), self.n_features)
        n_el = len(self.elements)
        nu_cols = torch.arange(self.n_sensitivities) * n_el  # (ν,)
        out: dict[str, DescriptorResult] = {}
        for e, symbol in enumerate(self.elements):
            atoms = torch.as_tensor(np.flatnonzero(species == e), dtype=torch.int64)  # (n_e,)
            if atoms.numel() == 0:
                continue
            blocks = None
            if derivatives:
                assert ds is not None
                unit = vec_t / r.unsqueeze(1)  # (P, 3)
                blocks = {}
                for f, neighbor in enumerate(self.elements):
                    sel = torch.nonzero((sp[pf_t] == e) & (sp[ps_t] == f)).squeeze(1)
                    blocks[neighbor] = PairDerivatives(
                        pair_first=pf_t[sel],
                        pair_second=ps_t[sel],
                        center=torch.searchsorted(atoms, pf_t[sel]),
                        vectors=vec_t[sel],
                        feature_index=nu_cols + f,
                        dG_dr=ds[sel].unsqueeze(2) * unit[sel].unsqueeze(1),  # (P_ef, ν, 3)
                    )
            out[symbol] = DescriptorResult(values=g[atoms], atom_index=atoms, pairs=blocks)
        return out

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items() if k != "type")


def _unpack(neighbors: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair_first, pair_second, vectors) from a tuple or a Neighbors-like object."""
    if hasattr(neighbors, "pair_first"):
        return neighbors.pair_first, neighbors.pair_second, neighbors.vectors
    if isinstance(neighbors, tuple | list) and len(neighbors) == 3:
        return tuple(np.asarray(x) for x in neighbors)  # type: ignore[return-value]
    raise DescriptorError(
        "neighbors must be (pair_first, pair_second, vectors) or an object with those "
        f"attributes, got {type(neighbors).__name__}"
    )


class NeighborSumGraph(nn.Module):
    """HIP-NN neighbour sums G[i, ν·S + f] = Σ_{j: species f} s_ν(r_ij) as one graph."""

    def __init__(self, descriptor: NeighborSum) -> None:
        super().__init__()
        self.descriptor = descriptor
        self.elements = list(descriptor.elements)
        self.r_cut = descriptor.r_cut
        cols = torch.arange(descriptor.n_features, dtype=torch.long)
        for e in self.elements:
            self.register_buffer(f"columns_{e}", cols.clone(), False)

    def columns(self, element: str) -> Tensor:
        """(F,) positions of ``element``'s features (every element has all ν·S columns)."""
        return getattr(self, f"columns_{element}")

    def forward(
        self, vectors: Tensor, pair_first: Tensor, pair_second: Tensor, species: Tensor
    ) -> Tensor:
        """G (N, ν·S), column k = ν·S + f."""
        n, n_el = species.shape[0], len(self.elements)
        dist = torch.linalg.vector_norm(vectors, dim=1)  # (P,)
        keep = torch.nonzero(dist.detach() < self.r_cut).squeeze(1)
        s, _ = self.descriptor.sensitivities(dist.index_select(0, keep))  # (P_c, ν)
        slot = pair_first.index_select(0, keep) * n_el + species.index_select(
            0, pair_second.index_select(0, keep)
        )
        acc = s.new_zeros(n * n_el, s.shape[1]).index_add(0, slot, s)  # (N·S, ν)
        return acc.view(n, n_el, s.shape[1]).transpose(1, 2).reshape(n, n_el * s.shape[1])
