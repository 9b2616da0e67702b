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

Every other top-level key but ``derivatives`` and ``dtype`` names a descriptor type of
:mod:`dparallel.descriptors.registry` and is validated by that type's config model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, GetJsonSchemaHandler, ValidationError, model_validator
from pydantic_core import CoreSchema, InitErrorDetails, PydanticCustomError

from dparallel._spec import SpecModel
from dparallel.config import describe_validation_error, read_yaml
from dparallel.config import section as config_section
from dparallel.descriptors.acsf_spec import ACSFSpec
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.descriptors.neighbor_sum_spec import NeighborSumSpec
from dparallel.descriptors.registry import BuildContext, descriptor_kind, registered
from dparallel.errors import ConfigError, DescriptorError, DParallelError
from dparallel.n2p2.declared_units import potential_units
from dparallel.n2p2.symmetry_functions import acsf_from_input_nn

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pydantic.json_schema import JsonSchemaValue

__all__ = ["ACSFSpec", "DescriptorsSpec", "NeighborSumSpec", "load_descriptors"]


class DescriptorsSpec(SpecModel):
    """What featurization computes: one section per registered descriptor type, read by
    that type's config model (``spec.acsf``; ``None`` for a registered type not given)."""

    model_config = ConfigDict(extra="allow")  # the sections: checked by _sections

    derivatives: bool = False
    dtype: Literal["float64", "float32"] = "float64"

    @model_validator(mode="wrap")
    @classmethod
    def _sections(cls, data: Any, handler: Callable[[Any], DescriptorsSpec]) -> DescriptorsSpec:
        """Each descriptor section through its type's model (errors keep their key path)."""
        if isinstance(data, DescriptorsSpec) or not isinstance(data, dict):
            return handler(data)
        rest, sections, errors = {}, {}, []
        for key, value in data.items():
            if key in cls.model_fields:
                rest[key] = value
                continue
            try:
                model = descriptor_kind(key).spec()
            except DescriptorError as exc:
                problem = PydanticCustomError("unknown_key", "{why}", {"why": str(exc)})
                errors.append(InitErrorDetails(type=problem, loc=(key,), input=value))
                continue
            try:
                sections[key] = None if value is None else model.model_validate(value)
            except ValidationError as exc:
                errors += [
                    InitErrorDetails(
                        type=e["type"],
                        loc=(key, *e["loc"]),
                        input=e["input"],
                        ctx=e.get("ctx", {}),
                    )
                    for e in exc.errors()
                ]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        if not any(v is not None for v in sections.values()):
            names = ", ".join(repr(n) for n in registered())
            raise ValueError(f"define {names} (one or more)")
        spec = handler(rest)
        assert spec.__pydantic_extra__ is not None
        spec.__pydantic_extra__.update({name: sections.get(name) for name in registered()})
        spec.__pydantic_extra__.update(sections)
        return spec

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The JSON schema lists every registered type's section (``dparallel schema``)."""
        schema = handler.resolve_ref_schema(handler(core_schema))
        for name in registered():
            section = descriptor_kind(name).spec().model_json_schema()
            schema["properties"][name] = {"anyOf": [section, {"type": "null"}], "default": None}
        schema["additionalProperties"] = False  # other keys are refused
        return schema

    def __getattr__(self, name: str) -> Any:
        """A section by name; ``None`` for a registered type the spec does not give."""
        try:
            return super().__getattr__(name)  # type: ignore[misc]
        except AttributeError:
            if name in registered():
                return None
            raise

    def sections(self) -> dict[str, Any]:
        """Name → config model of the descriptor sections given."""
        return {k: v for k, v in (self.__pydantic_extra__ or {}).items() if v is not None}

    def build(self, data_units: str = "ase") -> DescriptorSet:
        """The :class:`DescriptorSet` (relative paths are taken from the working directory;
        ``data_units``: the dataset's units, which an n2p2 input.nn's lengths follow)."""
        return self.build_checked(None, data_units)

    def build_checked(self, where: str | None, data_units: str = "ase") -> DescriptorSet:
        """:meth:`build`, where what cannot be built (an unknown element or cutoff, a shift
        beyond the cutoff, an input.nn not there, …) is one :class:`ConfigError` naming
        the section below the key path ``where`` (``descriptors.acsf: …``); ``None``: the
        error as raised."""
        readers: dict[str, Callable[..., Any]] = {
            "n2p2_input_nn": acsf_from_input_nn,
            "n2p2_units": potential_units,
        }
        context = BuildContext(data_units, readers)
        built = {}
        for name, section in self.sections().items():
            try:
                built[name] = section.build(context)
            except ConfigError:
                raise
            except DParallelError as exc:
                if where is None:
                    raise
                raise ConfigError(f"{where + '.' if where else ''}{name}: {exc}") from None
        return DescriptorSet(built, derivatives=self.derivatives, dtype=self.dtype)


def load_descriptors(
    path: str | Path,
    section: str | None = None,
    data_units: str = "ase",
    *,
    workflows: bool = False,
) -> DescriptorSet:
    """Read and validate a descriptors YAML/JSON file; errors name the file and key path.

    ``section`` picks one top-level key (``"descriptors"`` of a workflow file); a file
    whose only key is ``descriptors`` is read as that section; a workflow file (that key
    beside others) without ``section`` is one error pointing at ``--workflow``. Relative
    paths inside (``acsf.n2p2``) are taken from the working directory, as in ``dparallel
    run``.
    ``data_units`` are the dataset's units (an n2p2 input.nn's lengths follow them).
    ``workflows``: a workflow file is read as its ``descriptors`` section, not refused.
    A workflow without that section but with ``training.init_from`` gives that model's
    descriptors (as ``dparallel run`` featurizes with them).
    """
    data: Any = read_yaml(path, "descriptors")
    init_from = _model_instead(data)
    if init_from is not None and (section == "descriptors" or workflows):  # fine-tuning
        from dparallel.train.init_from import source_descriptors

        try:
            return source_descriptors(init_from, data_units)
        except DParallelError as exc:
            raise ConfigError(f"{path}: training.init_from: {exc}") from None
    if section is not None:
        data = config_section(data, section, str(path))
    elif isinstance(data, dict) and set(data) == {"descriptors"}:
        data = data["descriptors"]
    elif isinstance(data, dict) and "descriptors" in data and workflows:
        data = config_section(data, "descriptors", str(path))
    elif isinstance(data, dict) and ("descriptors" in data or init_from is not None):
        raise ConfigError(
            f"{path}: a workflow file (its descriptors are its 'descriptors' section), not a "
            "descriptors file: pass it with --workflow"
        )
    try:
        spec = DescriptorsSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"{path}: invalid descriptors:\n{describe_validation_error(exc)}"
        ) from None
    try:
        return spec.build_checked("", data_units=data_units)
    except ConfigError as exc:
        raise ConfigError(f"{path}: invalid descriptors: {exc}") from None


def _model_instead(data: Any) -> Any:  # noqa: ANN401
    """A workflow's ``training.init_from`` when it has no ``descriptors`` section (the
    model's are featurized: :meth:`dparallel.workflow.WorkflowSpec.descriptor_set`)."""
    if not isinstance(data, dict) or data.get("descriptors") is not None:
        return None
    training = data.get("training")
    return training.get("init_from") if isinstance(training, dict) else None
