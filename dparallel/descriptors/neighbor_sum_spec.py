"""The ``neighbor_sum:`` section of a descriptors spec (built into a :class:`NeighborSum`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from dparallel._spec import SpecModel

if TYPE_CHECKING:
    from dparallel.descriptors.neighbor_sum import NeighborSum
    from dparallel.descriptors.registry import BuildContext

__all__ = ["NeighborSumSpec"]


class NeighborSumSpec(SpecModel):
    """HIP-NN-style neighbor-sum features (see :class:`dparallel.descriptors.NeighborSum`)."""

    elements: list[str]
    r_cut: float = Field(5.0, gt=0)
    n_sensitivities: int = Field(20, ge=1)
    r_min: float = Field(0.8, gt=0)
    r_max: float | None = None
    kind: Literal["inverse", "gaussian"] = "inverse"
    cutoff: Literal["cos2"] = "cos2"
    sigma: float | None = None

    def build(self, context: BuildContext | None = None) -> NeighborSum:
        """The :class:`NeighborSum` this spec defines (``context`` is not needed)."""
        from dparallel.descriptors.neighbor_sum import NeighborSum  # a torch module

        return NeighborSum(**self.model_dump())
