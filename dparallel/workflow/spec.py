"""The workflow file: one validated YAML document that drives ingest → featurize → train → export.

Every key is documented in ``workflows/quickstart.yaml``. Relative paths are taken from
the current working directory (:func:`dparallel.config.resolve_path`), never from the
file's folder; ``dataset.path`` and ``store.path`` may be URLs (``s3://…``), never read
as relative paths (:meth:`WorkflowSpec.dataset_location`). Unknown keys and wrong types
fail before any work starts, with the key path in the message (:func:`load_workflow`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from dparallel._spec import SpecModel
from dparallel.cluster import ClusterSpec
from dparallel.config import apply_overrides, describe_validation_error, read_yaml, resolve_path
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.errors import ConfigError, DParallelError
from dparallel.io.location import Location, LocationError, as_location, require_local_path
from dparallel.train.spec import TrainingSpec
from dparallel.workflow.descriptors_spec import DescriptorsSpec

if TYPE_CHECKING:
    import os

__all__ = [
    "OVERWRITE_SETTING",
    "QUICKSTART",
    "DatasetSpec",
    "GenerateSpec",
    "OutputSpec",
    "PartitionSpec",
    "StoreSpec",
    "WorkflowSpec",
    "apply_overrides",
    "load_quickstart",
    "load_workflow",
    "parse_workflow",
    "workflow_schema",
]


_StorageOptions = Annotated[
    dict[str, Any],
    Field(
        default_factory=dict,
        description="options for a URL (on s3://, s3fs's names: {endpoint_url: ...}, "
        "{profile: ...}; on az://, adlfs's: {account_name: ...}); credentials best from "
        "the environment (AWS_*, AZURE_*) of every process",
    ),
]


#: How a message asks to replace a store in a workflow (run has no --overwrite flag).
OVERWRITE_SETTING = "--set store.overwrite=true (store.overwrite: true in the workflow)"


class GenerateSpec(SpecModel):
    """Generate the dataset when its file is missing (the embedded default)."""

    kind: Literal["emt_cu", "emt_molecules"] = Field(
        "emt_cu", description="emt_cu: Cu bulk/slabs; emt_molecules: G2 molecules (H, C, N, O)"
    )
    n_structures: int = Field(400, ge=1)
    seed: int = Field(0, ge=0, le=2**63 - 1, description="random seed (0 to 2**63 - 1)")


class DatasetSpec(SpecModel):
    """The structure file: a local path or a URL (``s3://bucket/data.extxyz``)."""

    path: str = Field(min_length=1)
    storage_options: _StorageOptions
    format: str | None = Field(None, description="extxyz, n2p2 or any ASE format; None: guess")
    units: str = Field("ase", description="ase (Å, eV) or bohr-hartree (n2p2 files)")
    on_error: Literal["raise", "skip"] = "raise"
    energy_key: str | None = Field(
        None,
        min_length=1,
        description="extxyz comment-line key (ASE info key) of the energy; null: energy, "
        "else REF_energy",
    )
    forces_key: str | None = Field(
        None,
        min_length=1,
        description="extxyz Properties column (ASE arrays key) of the forces; null: forces, "
        "else REF_forces",
    )
    generate: GenerateSpec | None = None

    @field_validator("units")
    @classmethod
    def _known_units(cls, value: str) -> str:
        from dparallel.io.units import check_units

        return check_units(value, "units", ValueError)

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str | None) -> str | None:
        from dparallel.io.source import known_format

        if value is not None and not known_format(value):  # as open_source reads them
            raise ValueError(f"{value!r} is neither extxyz, n2p2 nor a format ASE reads")
        return value

    @model_validator(mode="after")
    def _keys_for_a_format_with_keys(self) -> DatasetSpec:
        """No label keys for a format named n2p2 (as ``open_source`` refuses them)."""
        from dparallel.io.source import format_name

        given = [k for k in ("energy_key", "forces_key") if getattr(self, k) is not None]
        if given and self.format is not None and format_name(self.format) == "n2p2":
            raise ValueError(
                f"{' and '.join(given)} cannot be given for format {self.format!r}, whose "
                "energy and forces have fixed places; remove them"
            )
        return self

    @model_validator(mode="after")
    def _generated_as_written(self) -> DatasetSpec:
        """``generate`` writes extxyz in Å and eV: read the file so (not as Bohr, n2p2, …)."""
        if self.generate is None:
            return self
        from dparallel.io.source import format_by_name, format_name
        from dparallel.io.units import same_units

        if not same_units(self.units, "ase"):
            wrong = f"units is {self.units!r}"
        elif self.format is not None and format_name(self.format) != "extxyz":
            wrong = f"format is {self.format!r}"
        elif self.format is None and format_by_name(PurePosixPath(self.path).name) == "n2p2":
            wrong = "the path's .data name is read as n2p2"
        elif self.energy_key not in (None, "energy") or self.forces_key not in (None, "forces"):
            wrong = "energy_key/forces_key name keys it does not write (energy, forces)"
        else:
            return self
        raise ValueError(
            f"generate writes an extxyz file in Å and eV, but {wrong}: the store would hold "
            "it misread; use units: ase and format: extxyz (or null with an .extxyz path) and "
            "no label keys, or remove generate"
        )


class PartitionSpec(SpecModel):
    """How structures are grouped into tasks."""

    atoms: int | None = Field(
        None,
        ge=1,
        description="target atoms per partition; null: ~4 partitions per worker, "
        "5,000-20,000 atoms each (less data: one per worker, at least 1,000 atoms)",
    )


class StoreSpec(SpecModel):
    """The zarr store: a local folder or a URL (``s3://bucket/data.zarr``)."""

    path: str = Field(min_length=1)
    overwrite: bool = False
    storage_options: _StorageOptions


class OutputSpec(SpecModel):
    """Where the trained model, metrics and plots go (a local directory)."""

    model_dir: str = Field(min_length=1)
    export: bool = True

    @field_validator("model_dir")
    @classmethod
    def _a_local_folder(cls, value: str) -> str:
        try:
            return str(require_local_path(value, "the model directory"))
        except LocationError as exc:
            raise ValueError(str(exc)) from None


class WorkflowSpec(SpecModel):
    """A whole run: dataset, descriptors, partitioning, store, cluster, training, export."""

    name: str = "dparallel"
    dataset: DatasetSpec
    descriptors: DescriptorsSpec | None = Field(
        None,
        description="what featurize computes; left out with training.init_from: the "
        "descriptors of that model (with derivatives)",
    )
    partitioning: PartitionSpec = PartitionSpec()
    store: StoreSpec
    cluster: ClusterSpec = ClusterSpec()
    training: TrainingSpec | None = None
    output: OutputSpec | None = None
    _built: DescriptorSet | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _descriptors_or_a_model(self) -> WorkflowSpec:
        """No ``descriptors`` section: only with ``training.init_from`` (its model's)."""
        if self.descriptors is None and (self.training is None or not self.training.init_from):
            raise ValueError(
                "no descriptors section: give one, or training.init_from (a model whose "
                "descriptors are then used)"
            )
        return self

    def descriptor_set(self) -> DescriptorSet:
        """What featurize computes: the ``descriptors`` section built, or without one the
        descriptors of the model ``training.init_from`` names (with derivatives, float64;
        :class:`ConfigError` naming that key when it has none)."""
        if self._built is None:
            self._built = self._built_descriptors()
        return self._built

    def _built_descriptors(self) -> DescriptorSet:
        if self.descriptors is not None:
            return self.descriptors.build_checked("descriptors", data_units=self.dataset.units)
        from dparallel.train.init_from import source_descriptors

        assert self.training is not None and self.training.init_from is not None
        try:
            return source_descriptors(self.training.init_from, self.dataset.units)
        except DParallelError as exc:
            raise ConfigError(f"training.init_from: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return json.loads(self.model_dump_json())

    def dataset_location(self) -> Location:
        """Where the dataset is (a path or a URL, with its ``storage_options``)."""
        return as_location(self.dataset.path, self.dataset.storage_options)

    def store_location(self) -> Location:
        """Where the store is (a path or a URL, with its ``storage_options``)."""
        return as_location(self.store.path, self.store.storage_options)

    def scaling_location(self) -> Location:
        """Where ``run`` writes n2p2's ``scaling.data``: beside the store
        (``store.zarr`` → ``store.scaling.data``)."""
        store = self.store_location()
        return store.sibling(Path(store.name).with_suffix(".scaling.data").name)

    def check(self, protect: Iterable[str | os.PathLike[str]] = ()) -> None:
        """What ``run`` would refuse before any work, beyond the schema (``validate`` says
        the same): the locations (:meth:`check_locations`), descriptors that cannot be
        built (an unknown element or cutoff, a shift beyond the cutoff, …), sections
        that do not fit together (:meth:`check_sections`), what is at the local paths
        (:meth:`check_paths`; ``protect``: the workflow file) and training keys or
        descriptors that ``training.init_from``'s model refuses, as :class:`ConfigError`
        naming the keys."""
        self.check_locations()
        self.descriptor_set()
        self.check_sections()
        self.check_paths(protect)
        if self.training is not None and self.training.init_from:
            self._fits_the_model(self.training)

    def check_paths(self, protect: Iterable[str | os.PathLike[str]] = ()) -> None:
        """Refuse (:class:`ConfigError` naming the key) what ``run`` would find at the
        local paths before featurizing or training: a dataset that is a folder, missing
        without ``generate``, or below a file; a store path that is a file, a folder
        holding other files, below a file, or an input (the dataset, ``protect``), and
        a folder or another file at its ``scaling.data`` (:meth:`scaling_location`); a
        model directory that is a file, someone else's folder, or the store's or
        ``init_from``'s; TLS files (``cluster.tls``) that are not there. Only read,
        nothing written; URLs are left to ``run`` (asking them needs their server). A
        store made with other descriptors is refused unless ``store.overwrite`` (the
        dataset is not read: ``run`` compares it)."""
        from dparallel._files import file_in_the_way
        from dparallel.store import refuse_foreign_target
        from dparallel.train.model_dir import check_model_dir
        from dparallel.workflow.featurize import refuse_scaling_target
        from dparallel.workflow.run_dirs import finished_model

        dataset, store = self.dataset_location(), self.store_location().local
        for key, where in (("dataset.path", dataset), ("store.path", self.store_location())):
            if where.protocol == "memory":  # a workflow's workers are other processes
                raise ConfigError(
                    f"{key}: {where} lives in one process alone, and a workflow's workers are "
                    "other processes: use a folder they share or an object store (s3://, az://)"
                )
        checks: list[tuple[str, Callable[[], object]]] = []
        if dataset.local is not None and (self.dataset.generate is None or dataset.exists()):
            checks.append(("dataset.path", lambda: _source_file(dataset)))
        elif dataset.local is not None and (above := file_in_the_way(dataset.local)) is not None:
            checks.append(("dataset.path", lambda: _below_file(above, "generate cannot write")))
        if store is not None:
            inputs = [*protect, *([dataset.local] if dataset.local is not None else [])]
            checks.append(
                ("store.path", lambda: refuse_foreign_target(store, self.store.overwrite, inputs))
            )
            if not self.store.overwrite:
                checks.append(("store.path", lambda: self._store_of_these_descriptors(store)))
            scaling = self.scaling_location()
            if self.descriptor_set().acsf is not None and store.parent.is_dir():  # else made by run
                checks.append(("store.path", lambda: refuse_scaling_target(scaling, store)))
        if self.training is not None and self.output is not None:
            model_dir, source = self.output.model_dir, self.training.init_from
            if not finished_model(Path(model_dir).expanduser()):  # else run reuses or skips it
                checks.append(
                    ("output.model_dir", lambda: check_model_dir(model_dir, store, source))
                )
        tls = self.cluster.tls
        if tls is not None and self.cluster.kind != "local":  # a local cluster has no TLS
            checks.append(("", tls.check_files))  # its message names the key
        for key, check in checks:
            try:
                check()
            except DParallelError as exc:
                raise ConfigError(f"{key}: {exc}" if key else str(exc)) from None

    def check_sections(self) -> None:
        """Refuse (:class:`ConfigError`) what one section asks of another and that ``run``
        would meet only after featurizing: a training descriptor the store will not hold,
        force training from stored descriptors without their derivatives, and a model
        directory in the store."""
        training, descriptors = self.training, self.descriptor_set()
        if training is not None and training.descriptor not in descriptors.by_name:
            given = ", ".join(descriptors.by_name) or "none"
            raise ConfigError(
                f"training.descriptor is {training.descriptor!r}, but descriptors has no "
                f"{training.descriptor!r} section (given: {given}): add descriptors."
                f"{training.descriptor}, or train on one of those"
            )
        if (
            training is not None
            and training.force_weight > 0
            and training.descriptor_source == "stored"
            and not descriptors.derivatives
        ):
            raise ConfigError(
                f"training.force_weight is {training.force_weight:g} (training on forces) "
                "from stored descriptors, but "
                "descriptors.derivatives is false: set descriptors.derivatives: true, or "
                "training.descriptor_source: computed, or training.force_weight: 0"
            )
        store = self.store_location().local
        if self.output is not None and store is not None:
            model_dir = resolve_path(self.output.model_dir).resolve()
            store = resolve_path(store).resolve()
            if model_dir == store or store in model_dir.parents:
                raise ConfigError(
                    f"output.model_dir ({self.output.model_dir}) is "
                    f"{'' if model_dir == store else 'inside '}store.path ({self.store.path}): "
                    "choose a folder outside the store"
                )

    def _fits_the_model(self, training: TrainingSpec) -> None:
        """Refuse, before featurizing, what training from ``training.init_from`` would
        refuse after it: architecture keys other than the model's, and descriptors other
        than those it was trained on (a store of those)."""
        from dparallel.train.init_from import check_spec, descriptor_differences, load_source

        assert training.init_from is not None
        try:
            source = load_source(training.init_from, self.dataset.units)
            check_spec(training, source)
        except DParallelError as exc:  # most say "init_from: …" already
            said = str(exc)
            raise ConfigError(
                f"training.{said}"
                if said.startswith("init_from: ")
                else f"training.init_from: {said}"
            ) from None
        if self.descriptors is None:  # the model's are featurized
            return
        kind = source.descriptor_kind
        said = descriptor_differences(self.descriptor_set().to_dict().get(kind), source)
        if said:
            raise ConfigError(
                f"descriptors.{kind} are not those of {source.file} (training.init_from: "
                f"{said}): remove the descriptors section (the model's are used then)"
            )

    def _store_of_these_descriptors(self, store: Path) -> None:
        """Raise what featurize raises for a store at ``store`` made with other descriptors
        (or of another format) unless ``store.overwrite``: compared without the dataset
        (:func:`~dparallel.store.store_status` of the ``features`` alone)."""
        from dparallel.store import store_status

        features = self.descriptor_set().to_dict()
        status = store_status(
            store, source_fingerprint=None, config={"features": features}, plan=None
        )
        if status.kind in ("store", "other_format") and not status.matches:
            raise status.mismatch_error().naming(OVERWRITE_SETTING)

    def check_locations(self) -> None:
        """Refuse (:class:`ConfigError`) a URL whose client is not installed, and a store
        at a URL where dparallel cannot write conditionally; nothing is read or written."""
        from dparallel.io.location import LocationError
        from dparallel.store import check_writable

        for key, location in (
            ("dataset.path", self.dataset_location()),
            ("store.path", self.store_location()),
        ):
            if location.is_local:
                continue
            try:
                location.check_client()
                if key == "store.path":
                    check_writable(location)
            except (LocationError, DParallelError) as exc:
                raise ConfigError(f"{key}: {exc}") from None


def _below_file(above: Path, who: str) -> None:
    from dparallel.errors import UnsafePathError

    raise UnsafePathError(f"{above} is a file, not a folder: {who} below it; choose another path")


def _source_file(dataset: Location) -> None:
    """:func:`~dparallel.io.source.check_source_file`, where a missing file says what
    makes one."""
    from dparallel.errors import SourceNotFoundError
    from dparallel.io.source import check_source_file

    try:
        check_source_file(dataset)
    except SourceNotFoundError as exc:
        raise SourceNotFoundError(
            f"{exc}: give an existing structure file, or a dataset.generate section to make it"
        ) from None


def parse_workflow(
    data: Mapping[str, Any], overrides: Iterable[str] = (), source: str = "workflow"
) -> WorkflowSpec:
    """Validate a raw workflow dict; errors list each bad key path and why."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{source}: a workflow is a mapping of sections, got {type(data).__name__}"
        )
    overrides = tuple(overrides)
    data = apply_overrides(data, overrides)
    try:
        return WorkflowSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"{source}: invalid workflow:\n"
            f"{describe_validation_error(exc, overrides, schema=workflow_schema())}"
        ) from None


def load_workflow(path: str | Path, overrides: Iterable[str] = ()) -> WorkflowSpec:
    """Read and validate a workflow YAML file (with ``--set`` overrides)."""
    data = read_yaml(path, "workflow")
    return parse_workflow(data or {}, overrides, source=str(path))


def workflow_schema() -> dict[str, Any]:
    """The JSON schema of a workflow file."""
    return WorkflowSpec.model_json_schema()


#: The embedded default workflow (also at ``workflows/quickstart.yaml``).
QUICKSTART = Path(__file__).with_name("quickstart.yaml")


def load_quickstart(overrides: Iterable[str] = ()) -> WorkflowSpec:
    """The embedded default workflow, validated."""
    return load_workflow(QUICKSTART, overrides)
