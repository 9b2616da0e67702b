"""Per-element descriptor results shared by every descriptor (ACSF, NeighborSum).

Rows are atoms of one central element e in batch order; per-pair derivatives are kept
per neighbour element f, only for the features of e that an f neighbour can change
(docs/acsf.md, "Derivative layout").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["DescriptorResult", "PairDerivatives", "store_keys"]


@dataclass
class PairDerivatives:
    """∂G_i/∂r_ij for pairs (i, j) with centre element e and neighbour element f, for the
    features of e that an f neighbour can change (``feature_index``); flat tensors."""

    pair_first: torch.Tensor  # (P_ef,) int64, global row of centre i
    pair_second: torch.Tensor  # (P_ef,) int64, global row of neighbour j
    center: torch.Tensor  # (P_ef,) int64, row of i in DescriptorResult.values
    vectors: torch.Tensor  # (P_ef, 3) r_ij in Å (for the virial)
    feature_index: torch.Tensor  # (F_ef,) int64, columns of DescriptorResult.values
    dG_dr: torch.Tensor  # (P_ef, F_ef, 3) ∂G_i[feature_index]/∂r_ij, 1/Å


@dataclass
class DescriptorResult:
    """A descriptor's features of the atoms of one central element, rows in batch order
    (every registered descriptor type returns these)."""

    values: torch.Tensor  # (n_e, F_e)
    atom_index: torch.Tensor  # (n_e,) int64, global row in the batch
    pairs: dict[str, PairDerivatives] | None = None  # neighbour element → derivatives

    _PAIR_FIELDS = ("pair_first", "pair_second", "center", "vectors", "feature_index", "dG_dr")

    def to(self, device: torch.device | str) -> DescriptorResult:
        """This result with every tensor (values, atom rows, pair derivatives) on ``device``."""
        pairs = None
        if self.pairs is not None:
            pairs = {
                f: PairDerivatives(**{n: getattr(pd, n).to(device) for n in self._PAIR_FIELDS})
                for f, pd in self.pairs.items()
            }
        return DescriptorResult(self.values.to(device), self.atom_index.to(device), pairs)

    def to_numpy(self) -> dict[str, np.ndarray]:
        """Flat numpy arrays: ``values``, ``atom_index`` and ``{f}/{field}`` per neighbour f."""
        out = {"values": self.values.detach().numpy(), "atom_index": self.atom_index.numpy()}
        for f, pd in (self.pairs or {}).items():
            for name in self._PAIR_FIELDS:
                out[f"{f}/{name}"] = getattr(pd, name).detach().numpy()
        return out

    @classmethod
    def from_numpy(cls, arrays: dict[str, Any]) -> DescriptorResult:
        """Inverse of :meth:`to_numpy` (e.g. arrays read back from a store); tensors are
        taken as they are (autograd kept)."""
        import torch

        def tensor(a: Any) -> torch.Tensor:
            return a if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a))

        neighbours = dict.fromkeys(k.split("/")[0] for k in arrays if "/" in k)
        pairs = {
            f: PairDerivatives(**{n: tensor(arrays[f"{f}/{n}"]) for n in cls._PAIR_FIELDS})
            for f in neighbours
        }
        return cls(
            values=tensor(arrays["values"]),
            atom_index=tensor(arrays["atom_index"]),
            pairs=pairs or None,
        )


def store_keys(arrays: dict[str, Any]) -> dict[str, Any]:
    """One element's :meth:`DescriptorResult.to_numpy` arrays as the store keys them:
    derivative blocks ``<F>/<name>`` go under ``d/<F>/<name>``."""
    return {(key if "/" not in key else f"d/{key}"): value for key, value in arrays.items()}
