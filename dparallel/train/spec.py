"""Validated training configuration (:class:`TrainingSpec`), from YAML and ``--set`` pairs."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dparallel.errors import ConfigError

__all__ = ["TrainingSpec", "parse_training_spec"]


class TrainingSpec(BaseModel):
    """Every knob of a training run; defaults reach the EMT Cu target (docs/training.md).

    Lengths in Å, energies in eV. Frozen and strict about unknown keys.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    descriptor: Literal["acsf", "neighbor_sum"] = "acsf"
    hidden: tuple[int, ...] = (48, 48)
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
    optimizer: Literal["adam", "adamw"] = "adam"
    lr: float = Field(3e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    batch_size: int = Field(8, ge=1)
    epochs: int = Field(300, ge=1)
    force_weight: float = Field(0.03, ge=0)
    schedule: Literal["plateau", "cosine", "none"] = "cosine"
    lr_min: float = Field(5e-5, ge=0)
    plateau_factor: float = Field(0.5, gt=0, lt=1)
    plateau_patience: int = Field(10, ge=1)
    early_stopping: int = Field(0, ge=0, description="epochs without improvement; 0 = off")
    validation_fraction: float = Field(0.1, ge=0, lt=1)
    test_fraction: float = Field(0.1, ge=0, lt=1)
    seed: int = 0
    shuffle_buffer: int = Field(512, ge=1, description="structures held for shuffling")
    prefetch: int = Field(1, ge=0, description="partitions read ahead in a thread")
    dtype: Literal["float64", "float32"] = "float64"
    threads: int = Field(1, ge=0, description="torch threads; 0 = leave the default")

    @model_validator(mode="after")
    def _check(self) -> TrainingSpec:
        if self.validation_fraction + self.test_fraction >= 1:
            raise ValueError("validation_fraction + test_fraction must be < 1")
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden layer sizes must be >= 1, got {self.hidden}")
        if (
            self.scaling in ("scale", "scalecenter", "scalesigma")
            and self.scale_max == self.scale_min
        ):
            raise ValueError("scale_max must differ from scale_min")
        if self.n2p2_compatible:
            from dparallel.train.activations import N2P2_EXPRESSIBLE

            if self.activation not in N2P2_EXPRESSIBLE:
                hint = " (use softplus_n2p2)" if self.activation == "softplus" else ""
                raise ValueError(
                    f"n2p2_compatible: n2p2 has no activation {self.activation!r}{hint}; "
                    f"choose one of {sorted(N2P2_EXPRESSIBLE)}"
                )
            if self.descriptor != "acsf":
                raise ValueError("n2p2_compatible: n2p2 potentials use ACSF descriptors")
            if not self.hidden:
                raise ValueError("n2p2_compatible: n2p2 networks need a hidden layer")
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (round-trips through :func:`parse_training_spec`)."""
        return json.loads(self.model_dump_json())


def _coerce(text: str) -> Any:
    """A ``--set`` value: YAML scalar/list syntax (``1e-3``, ``[32,32]``, ``true``)."""
    import yaml

    return yaml.safe_load(text)


def parse_training_spec(
    source: str | Path | Mapping[str, Any] | None = None,
    overrides: Iterable[str] = (),
) -> TrainingSpec:
    """Build a :class:`TrainingSpec` from a YAML file or mapping plus ``key=value`` overrides.

    Raises
    ------
    ConfigError
        Unknown keys, bad values or a malformed override; the message names them.
    """
    data: dict[str, Any] = {}
    where = "config"
    if isinstance(source, Mapping):
        data = dict(source)
    elif source is not None:
        import yaml

        where = str(source)
        try:
            loaded = yaml.safe_load(Path(source).read_text())
        except FileNotFoundError:
            raise ConfigError(f"training config {source} not found") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: not valid YAML: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{source}: expected a mapping of options, got {type(loaded)}")
        data = dict(loaded.get("train", loaded))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        data[key.strip()] = _coerce(value)
    try:
        return TrainingSpec(**data)
    except ValidationError as exc:
        lines = [f"{'.'.join(map(str, e['loc'])) or 'spec'}: {e['msg']}" for e in exc.errors()]
        raise ConfigError(f"{where}: invalid training config: " + "; ".join(lines)) from None
