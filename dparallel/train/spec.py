"""Validated training configuration (:class:`TrainingSpec`), from YAML and ``--set`` pairs."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from dparallel._spec import FromYaml, SpecModel
from dparallel.config import (
    DEVICE_PATTERN,
    apply_overrides,
    check_device,
    describe_validation_error,
    read_yaml,
    resolve_path,
    section,
)
from dparallel.descriptors.registry import DEFAULT_DESCRIPTOR, descriptor_kind
from dparallel.errors import ConfigError
from dparallel.train.optimizer_kinds import (
    DEFAULT_OPTIMIZER,
    OPTIMIZER_KEYS,
    OPTIMIZERS,
    optimizer_kind,
)

_DEFAULT_LR = 3e-3

#: Keys that say what the network is (with ``init_from``: set, they must be the model's).
#: ``null`` is as if left out, so ``--set training.hidden=null`` drops one a workflow sets.
ARCHITECTURE_KEYS = ("hidden", "activation", "scaling", "scale_min", "scale_max")
_DEFAULT_LR_MIN = 5e-5


class TrainingSpec(SpecModel):
    """Every knob of a training run; defaults reach the EMT Cu target (docs/training.md).

    Lengths in Å, energies in eV. Frozen and strict about unknown keys and types
    (:class:`dparallel._spec.SpecModel`).
    """

    descriptor: str = Field(DEFAULT_DESCRIPTOR, description="a registered descriptor type")
    descriptor_source: Literal["stored", "computed"] = Field(
        "stored", description="read stored values and dG/dr, or compute them per batch"
    )
    compute_with: Literal["auto", "graph", "kernel"] = Field(
        "auto",
        description="descriptor_source computed: torch graph + autograd forces on the "
        "device, the descriptor's kernel (values and dG/dr) on the host, or auto",
    )
    hidden: FromYaml[tuple[int, ...]] = (48, 48)
    activation: Literal[
        "tanh", "silu", "softplus", "gelu", "identity", "logistic", "softplus_n2p2", "relu",
        "gaussian", "cos", "revlogistic", "exp", "harmonic",
    ] = "tanh"  # fmt: skip
    scaling: Literal[
        "center_sigma", "minmax", "center", "none", "scale", "scalecenter", "scalesigma"
    ] = "center_sigma"
    scale_min: float = Field(0.0, description="n2p2's Smin (scaling scale/scalecenter/scalesigma)")
    scale_max: float = Field(1.0, description="n2p2's Smax (scaling scale/scalecenter/scalesigma)")
    n2p2_compatible: bool = Field(
        False, description="refuse choices n2p2 cannot evaluate (export --format n2p2)"
    )
    optimizer: str = Field(
        DEFAULT_OPTIMIZER,
        description="an optimizer of dparallel.train.optimizer_kinds.OPTIMIZERS",
        json_schema_extra={"enum": list(OPTIMIZERS)},
    )
    lr: float = Field(_DEFAULT_LR, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    batch_size: int = Field(8, ge=1)
    epochs: int = Field(300, ge=1)
    force_weight: float = Field(0.03, ge=0)
    force_weight_start: float | None = Field(
        None,
        ge=0,
        description="first-order optimizers: force weight at the start, moving to "
        "force_weight as the learning rate decays (None = force_weight throughout)",
    )
    kalman_epsilon: float = Field(0.01, gt=0, description="Kalman: P starts as I/epsilon")
    kalman_q0: float = Field(0.01, ge=0, description="Kalman: initial process noise")
    kalman_qtau: float = Field(2.302, ge=0, description="Kalman: q decays by exp(-qtau) per epoch")
    kalman_qmin: float = Field(1e-6, ge=0, description="Kalman: process noise floor")
    kalman_eta: float = Field(0.01, gt=0, description="Kalman: initial 1/measurement noise")
    kalman_etatau: float = Field(2.302, ge=0, description="Kalman: eta grows ×exp(etatau)/epoch")
    kalman_etamax: float = Field(1.0, gt=0, description="Kalman: eta ceiling")
    kalman_force_components: int = Field(
        3, ge=0, description="Kalman: force components per structure in each update"
    )
    schedule: Literal["plateau", "cosine", "none"] = "cosine"
    lr_min: float = Field(_DEFAULT_LR_MIN, ge=0)
    plateau_factor: float = Field(0.5, gt=0, lt=1)
    plateau_patience: int = Field(10, ge=1)
    early_stopping: int = Field(0, ge=0, description="epochs without improvement; 0 = off")
    validation_fraction: float = Field(0.1, ge=0, lt=1)
    test_fraction: float = Field(0.1, ge=0, lt=1)
    seed: int = Field(0, ge=0, le=2**63 - 1, description="random seed (0 to 2**63 - 1)")
    shuffle_buffer: int = Field(512, ge=1, description="structures held for shuffling")
    prefetch: int = Field(1, ge=0, description="partitions read ahead in a thread; 0 = off")
    batch_prefetch: int | Literal["auto"] = Field(
        "auto",
        description="streamed batches assembled and copied to the device ahead in a second "
        "thread (auto: 2 on a GPU, 0 on the CPU); 0 = off",
    )
    dtype: Literal["float64", "float32"] = "float64"
    threads: int = Field(1, ge=0, description="torch threads; 0 = leave the default")
    device: str = Field(
        "auto",
        description="auto (CUDA when present), cpu, cuda, cuda:N",
        json_schema_extra={"pattern": DEVICE_PATTERN},
    )
    data_on_device: bool | Literal["auto"] = Field(
        "auto",
        description="hold the store's arrays on the device (auto: when they fit a fraction "
        "of its free memory), else stream them through a prefetch thread",
    )
    allow_incomplete: bool = Field(
        False, description="train on the done partitions of an incomplete store"
    )
    init_from: FromYaml[Path] | None = Field(
        None,
        description="start from this model's weights, feature scaling and energy offsets: "
        "a dparallel model directory (model.pt) or an n2p2 potential directory",
    )

    @field_validator("descriptor")
    @classmethod
    def _registered(cls, name: str) -> str:
        descriptor_kind(name)  # a DescriptorError (ValueError) lists the registered ones
        return name

    @field_validator("device")
    @classmethod
    def _device(cls, text: str) -> str:
        return check_device(text, ValueError)

    @field_validator("optimizer")
    @classmethod
    def _known_optimizer(cls, name: str) -> str:
        optimizer_kind(name)  # a ConfigError (ValueError) lists the known ones
        return name

    @model_validator(mode="before")
    @classmethod
    def _null_is_left_out(cls, data: Any) -> Any:  # noqa: ANN401
        """An architecture key given as ``null`` is left out (:data:`ARCHITECTURE_KEYS`)."""
        if isinstance(data, Mapping):
            return {k: v for k, v in data.items() if v is not None or k not in ARCHITECTURE_KEYS}
        return data

    @model_validator(mode="after")
    def _check(self) -> TrainingSpec:
        self._refuse_ignored_optimizer_keys()
        if self.validation_fraction + self.test_fraction >= 1:
            raise ValueError("validation_fraction + test_fraction must be < 1")
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden layer sizes must be >= 1, got {self.hidden}")
        if self.lr_min > self.lr and "lr_min" not in self.model_fields_set:
            # a small lr with the default floor: keep the default's ratio (lr / 60)
            object.__setattr__(self, "lr_min", self.lr * _DEFAULT_LR_MIN / _DEFAULT_LR)  # frozen
        reads = optimizer_kind(self.optimizer).reads
        if self.schedule != "none" and "lr_min" in reads and self.lr_min > self.lr:
            raise ValueError(
                f"lr_min ({self.lr_min:g}) exceeds lr ({self.lr:g}): the {self.schedule} "
                "schedule would raise the learning rate, not lower it"
            )
        if self.force_weight_start is not None and self.schedule == "none":
            raise ValueError(
                "force_weight_start follows the learning rate down to force_weight, but "
                "schedule: none keeps the learning rate, so the weight would stay at "
                f"{self.force_weight_start:g}: use a cosine or plateau schedule, or "
                "force_weight alone"
            )
        if self.scaling.startswith("scale") and self.scale_max == self.scale_min:  # n2p2's
            raise ValueError("scale_max must differ from scale_min")
        if isinstance(self.batch_prefetch, int) and self.batch_prefetch < 0:
            raise ValueError(f"batch_prefetch must be >= 0 or auto, got {self.batch_prefetch}")
        if (
            self.descriptor_source == "computed"
            and self.compute_with == "graph"
            and optimizer_kind(self.optimizer).needs_derivatives
        ):
            raise ValueError(
                f"optimizer {self.optimizer} needs dG/dr: use descriptor_source: stored, or "
                "compute_with: kernel with it"
            )
        if self.n2p2_compatible:
            from dparallel.nn import N2P2_EXPRESSIBLE

            if self.activation not in N2P2_EXPRESSIBLE:
                hint = " (use softplus_n2p2)" if self.activation == "softplus" else ""
                raise ValueError(
                    f"n2p2_compatible: n2p2 has no activation {self.activation!r}{hint}; "
                    f"choose one of {sorted(N2P2_EXPRESSIBLE)}"
                )
            if not descriptor_kind(self.descriptor).n2p2:
                raise ValueError("n2p2_compatible: n2p2 potentials use ACSF descriptors")
            if not self.hidden:
                raise ValueError("n2p2_compatible: n2p2 networks need a hidden layer")
        return self

    def _refuse_ignored_optimizer_keys(self) -> None:
        """Refuse optimizer keys the chosen optimizer does not read, set to anything but
        their default (a default written out, as in a stored spec, is fine)."""
        kind = optimizer_kind(self.optimizer)
        fields = type(self).model_fields
        keys = [
            key
            for key in fields
            if key in OPTIMIZER_KEYS - kind.reads
            and key in self.model_fields_set
            and getattr(self, key) != fields[key].default
        ]
        if keys:
            readers = " or ".join(k.name for k in OPTIMIZERS.values() if set(keys) <= k.reads)
            one = len(keys) == 1
            raise ValueError(
                f"{', '.join(f'{key} ({getattr(self, key)!r})' for key in keys)} "
                f"{'is' if one else 'are'} not read by the {kind.title} optimizer "
                f"(optimizer: {kind.name}), which would ignore {'it' if one else 'them'}: "
                f"drop {'it' if one else 'them'}"
                + (f" or use optimizer {readers}" if readers else "")
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (round-trips through :func:`parse_training_spec`)."""
        return json.loads(self.model_dump_json())


#: Top-level sections of a workflow file (a training config may be a whole workflow). The
#: workflow is a layer above, so this is a copy of WorkflowSpec's fields but "training";
#: tests/workflow/test_workflow_spec.py holds it to them.
_WORKFLOW_SECTIONS = frozenset(
    {"name", "dataset", "descriptors", "partitioning", "store", "cluster", "output"}
)


def _training_section(data: Any, where: str) -> dict[str, Any]:
    """The training keys of a config document: its ``training:`` section or the whole file."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{where}: expected a mapping of training keys, got {type(data).__name__}"
        )
    if "training" in data:
        stray = [str(key) for key in data if key != "training" and key not in _WORKFLOW_SECTIONS]
        if stray:
            raise ConfigError(
                f"{where}: {', '.join(repr(k) for k in stray)} beside the 'training:' section "
                "would not be read: move them into it"
            )
        return section(data, "training", where)
    if "train" in data:
        raise ConfigError(
            f"{where}: the section is called 'training:' (as in workflow files), not 'train:'"
        )
    if _WORKFLOW_SECTIONS & set(data):
        raise ConfigError(f"{where}: this workflow has no 'training' section")
    return dict(data)


def parse_training_spec(
    source: str | Path | Mapping[str, Any] | None = None,
    overrides: Iterable[str] = (),
) -> TrainingSpec:
    """Build a :class:`TrainingSpec` from a config plus ``--set key=value`` overrides.

    ``source`` is a YAML file or a mapping holding either the training keys themselves or
    a ``training:`` section (so a workflow file serves as a training config), or an n2p2
    ``input.nn`` (a ``.nn`` file: :meth:`~dparallel.n2p2.InputNN.training_options`, with
    ``use_old_weights_short`` its folder as ``init_from``). Overrides
    use the grammar of every command (:func:`dparallel.config.apply_overrides`); keys may
    carry the ``training.`` prefix.

    Raises
    ------
    ConfigError
        Unknown keys, bad values or a malformed override; the message names them.
    """
    if source is None or isinstance(source, Mapping):
        where, document = "config", source
    elif Path(source).suffix == ".nn":  # n2p2's input.nn is no YAML
        from dparallel.n2p2 import read_input_nn

        where, document = str(source), read_input_nn(resolve_path(source)).training_options()
    else:
        where, document = str(source), read_yaml(source, "training config")
    overrides = tuple(overrides)
    data = apply_overrides(_training_section(document, where), overrides, root="training")
    try:
        return TrainingSpec(**data)
    except ValidationError as exc:
        schema = TrainingSpec.model_json_schema()
        said = describe_validation_error(exc, overrides, "training", schema)
        raise ConfigError(f"{where}: invalid training config:\n{said}") from None
