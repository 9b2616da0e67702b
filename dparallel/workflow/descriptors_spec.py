"""Validated descriptor definitions (YAML/JSON) → :class:`DescriptorSet`.

Example (``descriptors.yaml``)::

    acsf:                      # Behler-Parrinello symmetry functions (n2p2 types 2, 3, 9)
      elements: [H, C, O]
      r_cut: 6.0               # Å
      cutoff: cos              # n2p2 cutoff type: hard, cos, tanhu, tanh, exp, poly1..poly4
      alpha: 0.0               # inner cutoff fraction
      radial: [[0.5, 0.0], [1.0, 1.5]]          # (η [1/Å²], rs [Å])
      narrow: [[0.01, 1.0, 1.0, 0.0]]           # (η, ζ, λ, rs), type 3
      wide:   [[0.01, 2.0, -1.0, 0.0]]          # (η, ζ, λ, rs), type 9
    # or:  acsf: {n2p2: input.nn}  (the symmetry functions of an n2p2 input.nn, in n2p2's
    #      sorted order; its lengths are in the dataset's units unless `units:` says
    #      otherwise, e.g. acsf: {n2p2: input.nn, units: bohr-hartree})
    neighbor_sum:              # HIP-NN-style envsum features (optional)
      elements: [H, C, O]
      r_cut: 5.0
      n_sensitivities: 20
    derivatives: true          # store ∂G_i/∂r_ij per pair (needed for force training)
    dtype: float64
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dparallel.config import describe_validation_error, read_yaml, resolve_path
from dparallel.config import section as config_section
from dparallel.descriptors.acsf import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.errors import ConfigError
from dparallel.n2p2.symmetry_functions import acsf_from_input_nn

if TYPE_CHECKING:
    from pathlib import Path

    from dparallel.descriptors.neighbor_sum import NeighborSum

__all__ = ["ACSFSpec", "DescriptorsSpec", "NeighborSumSpec", "load_descriptors"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ACSFSpec(_Strict):
    """ACSF: either uniform parameters for every element pair, or an n2p2 ``input.nn``."""

    n2p2: str | None = Field(
        None, description="path of an n2p2 input.nn (relative to the working directory)"
    )
    units: str | None = Field(
        None,
        description="units of the input.nn lengths (rc, rs, eta): ase/angstrom-ev or "
        "bohr-hartree; default: the dataset's units (an input.nn goes with its input.data)",
    )
    order: Literal["n2p2", "given"] | None = Field(
        None, description="column order; default n2p2's sorted order for an input.nn, else given"
    )
    elements: list[str] | None = None
    r_cut: float = Field(6.0, gt=0)
    cutoff: str | int = "cos"
    alpha: float = Field(0.0, ge=0, lt=1)
    radial: list[tuple[float, float]] = []
    narrow: list[tuple[float, float, float, float]] = []
    wide: list[tuple[float, float, float, float]] = []

    @model_validator(mode="after")
    def _one_way(self) -> ACSFSpec:
        if self.n2p2 is None and not self.elements:
            raise ValueError("give either 'n2p2: input.nn' or 'elements' with parameters")
        if self.n2p2 is None and not (self.radial or self.narrow or self.wide):
            raise ValueError("no symmetry functions: give radial, narrow or wide parameters")
        if self.units is not None:
            from dparallel.io.source import UNITS

            if self.n2p2 is None:
                raise ValueError("'units' applies to an n2p2 input.nn only (uniform sets are in Å)")
            if self.units not in UNITS:
                raise ValueError(f"units must be one of {sorted(UNITS)}, got {self.units!r}")
        return self

    def build(self, data_units: str = "ase") -> ACSF:
        """The :class:`ACSF` this spec defines (``n2p2`` relative to the working directory).

        ``data_units``: units of the dataset, which an input.nn's lengths follow unless
        the spec gives ``units``.
        """
        if self.n2p2 is not None:
            return acsf_from_input_nn(
                str(resolve_path(self.n2p2)),
                unit=self.units or data_units,
                order=self.order or "n2p2",
            )
        acsf = ACSF.uniform(
            elements=list(self.elements or []),
            r_cut=self.r_cut,
            cutoff=self.cutoff,
            alpha=self.alpha,
            radial=self.radial,
            narrow=self.narrow,
            wide=self.wide,
        )
        if self.order == "n2p2":
            return ACSF(acsf.elements, {e: acsf.features(e) for e in acsf.elements}, "n2p2")
        return acsf


class NeighborSumSpec(_Strict):
    """HIP-NN-style neighbor-sum features (see :class:`dparallel.descriptors.NeighborSum`)."""

    elements: list[str]
    r_cut: float = Field(5.0, gt=0)
    n_sensitivities: int = Field(20, ge=1)
    r_min: float = Field(0.8, gt=0)
    r_max: float | None = None
    kind: Literal["inverse", "gaussian"] = "inverse"
    cutoff: Literal["cos2"] = "cos2"
    sigma: float | None = None

    def build(self) -> NeighborSum:
        """The :class:`NeighborSum` this spec defines."""
        from dparallel.descriptors.neighbor_sum import NeighborSum  # a torch module

        return NeighborSum(**self.model_dump())


class DescriptorsSpec(_Strict):
    """What featurization computes."""

    acsf: ACSFSpec | None = None
    neighbor_sum: NeighborSumSpec | None = None
    derivatives: bool = False
    dtype: Literal["float64", "float32"] = "float64"

    @model_validator(mode="after")
    def _something(self) -> DescriptorsSpec:
        if self.acsf is None and self.neighbor_sum is None:
            raise ValueError("define 'acsf', 'neighbor_sum' or both")
        return self

    def build(self, data_units: str = "ase") -> DescriptorSet:
        """The :class:`DescriptorSet` (relative paths are taken from the working directory;
        ``data_units``: the dataset's units, which an n2p2 input.nn's lengths follow)."""
        return DescriptorSet(
            acsf=None if self.acsf is None else self.acsf.build(data_units),
            neighbor_sum=None if self.neighbor_sum is None else self.neighbor_sum.build(),
            derivatives=self.derivatives,
            dtype=self.dtype,
        )


def load_descriptors(
    path: str | Path, section: str | None = None, data_units: str = "ase"
) -> DescriptorSet:
    """Read and validate a descriptors YAML/JSON file; errors name the file and key path.

    ``section`` picks one top-level key (``"descriptors"`` of a workflow file); a file
    whose only key is ``descriptors`` is read as that section. Relative paths inside
    (``acsf.n2p2``) are taken from the working directory, as in ``dparallel run``.
    ``data_units`` are the dataset's units (an n2p2 input.nn's lengths follow them).
    """
    from pydantic import ValidationError

    data: Any = read_yaml(path, "descriptors")
    if section is not None:
        data = config_section(data, section, str(path))
    elif isinstance(data, dict) and set(data) == {"descriptors"}:
        data = data["descriptors"]
    try:
        spec = DescriptorsSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"{path}: invalid descriptors:\n{describe_validation_error(exc)}"
        ) from None
    return spec.build(data_units=data_units)
