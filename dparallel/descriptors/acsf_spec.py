"""The ``acsf:`` section of a descriptors spec (validated, then built into an :class:`ACSF`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from dparallel._spec import FromYaml, SpecModel
from dparallel.config import resolve_path
from dparallel.descriptors.acsf import ACSF
from dparallel.descriptors.acsf_functions import MAX_R_CUT, refuse_far_cutoff
from dparallel.descriptors.registry import BuildContext

__all__ = ["ACSFSpec"]


#: The keys of a uniform set, which an n2p2 input.nn gives by its own lines.
_UNIFORM = ("elements", "r_cut", "cutoff", "alpha", "radial", "narrow", "wide")


class ACSFSpec(SpecModel):
    """ACSF: either uniform parameters for every element pair, or an n2p2 ``input.nn``."""

    n2p2: str | None = Field(
        None,
        min_length=1,
        description="path of an n2p2 input.nn (relative to the working directory)",
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
    r_cut: float = Field(6.0, gt=0, description=f"Å, at most {MAX_R_CUT:g}")
    cutoff: str | int = "cos"
    alpha: float = Field(0.0, ge=0, lt=1)
    radial: list[FromYaml[tuple[float, float]]] = Field(default_factory=list)
    narrow: list[FromYaml[tuple[float, float, float, float]]] = Field(default_factory=list)
    wide: list[FromYaml[tuple[float, float, float, float]]] = Field(default_factory=list)

    @field_validator("r_cut")
    @classmethod
    def _a_cutoff_in_angstrom(cls, value: float) -> float:
        refuse_far_cutoff("r_cut", value, "acsf parameters are in Å")
        return value

    @model_validator(mode="after")
    def _one_way(self) -> ACSFSpec:
        if self.n2p2 is None and not self.elements:
            raise ValueError("give either 'n2p2: input.nn' or 'elements' with parameters")
        if self.n2p2 is None and not (self.radial or self.narrow or self.wide):
            raise ValueError("no symmetry functions: give radial, narrow or wide parameters")
        unused = [
            name
            for name in _UNIFORM
            if self.n2p2 is not None
            and name in self.model_fields_set
            and getattr(self, name)
            != type(self).model_fields[name].get_default(call_default_factory=True)
        ]
        if unused:  # a default (a dumped spec) is no choice; another value would be ignored
            raise ValueError(
                f"{', '.join(unused)}: not used with 'n2p2: input.nn' (its lines give the "
                "elements, cutoffs and functions); remove or use one way only"
            )
        if self.units is not None:
            from dparallel.io.units import check_units

            if self.n2p2 is None:
                raise ValueError("'units' applies to an n2p2 input.nn only (uniform sets are in Å)")
            check_units(self.units, "units", ValueError)
        return self

    def build(self, context: BuildContext | None = None) -> ACSF:
        """The :class:`ACSF` this spec defines (``n2p2`` relative to the working directory).

        An input.nn is read by ``context``'s ``"n2p2_input_nn"`` reader
        (:func:`dparallel.n2p2.acsf_from_input_nn`); its lengths follow the units it
        declares (``# Units:``, as dparallel's exports say them; ``units`` contradicting
        them is refused), else the spec's ``units``, else ``context.data_units`` (the
        dataset's).
        """
        context = context or BuildContext()
        if self.n2p2 is not None:
            path = str(resolve_path(self.n2p2))
            units = context.reader("n2p2_units")(path, self.units, context.data_units)
            read = context.reader("n2p2_input_nn")
            acsf: ACSF = read(path, unit=units, order=self.order or "n2p2")
            return acsf
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
            return ACSF(
                acsf.elements, {e: acsf.features(e) for e in acsf.elements}, "n2p2", lenient=True
            )
        return acsf
