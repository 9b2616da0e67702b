"""The ``neighbor_sum:`` section of a descriptors spec (built into a :class:`NeighborSum`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from dparallel._spec import SpecModel
from dparallel.descriptors.acsf_functions import MAX_R_CUT, refuse_far_cutoff

if TYPE_CHECKING:
    from dparallel.descriptors.neighbor_sum import NeighborSum
    from dparallel.descriptors.registry import BuildContext

__all__ = ["NeighborSumSpec"]


class NeighborSumSpec(SpecModel):
    """HIP-NN-style neighbor-sum features (see :class:`dparallel.descriptors.NeighborSum`)."""

    elements: list[str]
    r_cut: float = Field(5.0, gt=0, description=f"Å, at most {MAX_R_CUT:g}")
    n_sensitivities: int = Field(20, ge=1)
    r_min: float = Field(0.8, gt=0)
    r_max: float | None = Field(None, gt=0)
    kind: Literal["inverse", "gaussian"] = "inverse"
    cutoff: Literal["cos2"] = "cos2"
    sigma: float | None = Field(None, gt=0, description="width; None: the kind's default")

    @field_validator("r_cut")
    @classmethod
    def _a_cutoff_in_angstrom(cls, value: float) -> float:
        refuse_far_cutoff("r_cut", value, "neighbor_sum lengths are in Å")
        return value

    def build(self, context: BuildContext | None = None) -> NeighborSum:
        """The :class:`NeighborSum` this spec defines (``context`` is not needed)."""
        from dparallel.descriptors.neighbor_sum import NeighborSum  # a torch module

        return NeighborSum(**self.model_dump())
