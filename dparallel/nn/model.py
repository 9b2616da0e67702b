"""The Behler-Parrinello HDNNP (one MLP per element), its descriptor scaling and its file.

Scaling: dparallel's modes and n2p2's scaling types (:func:`scaling_parameters`). The
trained-model file (``model.pt``) is a plain dict (read with
:func:`~dparallel.nn.files.load_torch_file`, so weights only): ``format``, ``version``, the
:class:`HDNNP` constructor arguments (``model_config``), its ``state_dict``, the descriptor
spec and kind, and the training spec as a dict (:func:`model_file`, :func:`load_model`).
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from dparallel.descriptors.feature_ranges import CONSTANT_WIDTH
from dparallel.errors import TrainingError
from dparallel.nn.activations import ACTIVATIONS, make_activation
from dparallel.nn.files import load_torch_file

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence

#: Feature scaling modes: dparallel's (constant features get factor 1) and n2p2's types.
SCALING_MODES = (
    "center_sigma",
    "minmax",
    "center",
    "none",
    "scale",
    "scalecenter",
    "scalesigma",
)
_N2P2_MODES = ("scale", "scalecenter", "scalesigma")


def scaling_parameters(
    stats: Mapping[str, Any], mode: str, smin: float = 0.0, smax: float = 1.0
) -> tuple[np.ndarray, np.ndarray, float]:
    """(shift, factor, offset) per feature so that scaled G = (G − shift) · factor + offset.

    ``stats`` holds n2p2 scaling.data fields (min, max, mean, sigma lists). dparallel modes
    (offset 0; constant features — σ or max − min below 1e-12 — get factor 1):
    ``center_sigma`` (G − mean)/σ; ``minmax`` to [−1, 1]; ``center`` G − mean; ``none``.
    n2p2 types (``SymFnc::scale``, offset = Smin, the same floating-point operations):
    ``scale`` Smin + (Smax − Smin)(G − min)/(max − min); ``scalecenter`` the same around
    the mean; ``scalesigma`` Smin + (Smax − Smin)(G − mean)/σ. Where n2p2 would divide by
    zero (a constant feature) the factor is Smax − Smin instead of n2p2's inf.
    """
    lo = np.asarray(stats["min"], np.float64)
    hi = np.asarray(stats["max"], np.float64)
    mean = np.asarray(stats["mean"], np.float64)
    sigma = np.asarray(stats["sigma"], np.float64)
    if mode == "center_sigma":  # max - min too: stores featurized before their σ was exact
        varies = (sigma > CONSTANT_WIDTH) & (hi - lo > CONSTANT_WIDTH)  # held ~1e-8·|x| there
        return mean, 1.0 / np.where(varies, sigma, 1.0), 0.0
    if mode == "minmax":
        width = hi - lo
        return 0.5 * (hi + lo), 2.0 / np.where(width > CONSTANT_WIDTH, width, 1.0), 0.0
    if mode == "center":
        return mean, np.ones_like(mean), 0.0
    if mode == "none":
        return np.zeros_like(mean), np.ones_like(mean), 0.0
    if mode in _N2P2_MODES:
        denom = sigma if mode == "scalesigma" else hi - lo
        factor = (smax - smin) / np.where(denom != 0.0, denom, 1.0)
        return (lo if mode == "scale" else mean), factor, float(smin)
    raise TrainingError(f"unknown scaling mode {mode!r}; expected one of {SCALING_MODES}")


def scaling_from_statistics(stats: Mapping[str, Any], mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(shift, factor) per feature so that scaled G = (G − shift) · factor (dparallel modes).

    See :func:`scaling_parameters`; the n2p2 types need its offset as well.
    """
    shift, factor, offset = scaling_parameters(stats, mode)
    if offset != 0.0:
        raise TrainingError(f"scaling mode {mode!r} has an offset; use scaling_parameters")
    return shift, factor


class DivideBy(nn.Module):
    """x / n: n2p2's ``normalize_nodes`` (pre-activation divided by the fan-in)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = float(n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / self.n


class HDNNP(nn.Module):
    """Sum of per-element atomic energies E_i = ref_e + s · MLP_e((G_i − shift_e) · factor_e + o).

    One network per chemical symbol of ``elements``, taking ``n_features[e]`` descriptor
    columns. ``hidden`` (layer sizes) and ``activations`` (names of
    :data:`dparallel.nn.activations.ACTIVATIONS`, one per hidden layer plus the output layer;
    default ``activation`` on hidden layers, identity output) are one list for every element
    or element → list. ``normalize_nodes`` divides every layer's pre-activation by its number
    of inputs (n2p2's). ``scaling``, optional descriptor scaling as data (``{"mode": one of
    SCALING_MODES, "smin", "smax", "statistics": {element: {"min", "max", "mean",
    "sigma"}}}``), sets the shift/factor buffers and the offset o = Smin (n2p2 types) and is
    kept in :meth:`config` (n2p2 export writes its statistics to scaling.data).
    """

    ref_energy: torch.Tensor  # (n_elements,) eV per atom (buffer), float64 in every dtype
    energy_scale: torch.Tensor  # () eV (buffer)
    nets: nn.ModuleDict

    def __init__(
        self,
        elements: Sequence[str],
        n_features: Mapping[str, int],
        hidden: Sequence[int] | Mapping[str, Sequence[int]] = (24, 24),
        activation: str = "tanh",
        activations: Sequence[str] | Mapping[str, Sequence[str]] | None = None,
        normalize_nodes: bool = False,
        scaling: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise TrainingError(f"activation must be one of {sorted(ACTIVATIONS)}")
        self.elements = list(elements)
        self.n_features = {e: int(n_features[e]) for e in self.elements}
        self.hidden = _per_element(hidden, self.elements, "hidden", int)
        self.activation = activation
        self.activations = (
            {e: [activation] * len(h) + ["identity"] for e, h in self.hidden.items()}
            if activations is None
            else _per_element(activations, self.elements, "activations", str)
        )
        self.normalize_nodes = bool(normalize_nodes)
        self._config: dict[str, Any] = {
            "elements": self.elements,
            "n_features": self.n_features,
            "hidden": _jsonable(hidden, int),
            "activation": activation,
        }
        if activations is not None:
            self._config["activations"] = _jsonable(activations, str)
        if self.normalize_nodes:
            self._config["normalize_nodes"] = True
        nets = {}
        for e in self.elements:
            acts = self.activations[e]
            if len(acts) != len(self.hidden[e]) + 1:
                raise TrainingError(
                    f"element {e}: {len(acts)} activations for {len(self.hidden[e])} hidden "
                    "layers; give one per hidden layer plus one for the output layer"
                )
            unknown = [a for a in acts if a not in ACTIVATIONS]
            if unknown:
                raise TrainingError(
                    f"unknown activation {unknown[0]!r}; expected one of {sorted(ACTIVATIONS)}"
                )
            if any(h < 1 for h in self.hidden[e]):
                raise TrainingError(f"element {e}: hidden sizes must be >= 1, got {self.hidden[e]}")
            layers: list[nn.Module] = []
            width = self.n_features[e]
            for h, act in zip([*self.hidden[e], 1], acts, strict=True):
                layers.append(nn.Linear(width, h))
                if self.normalize_nodes:
                    layers.append(DivideBy(width))
                if act != "identity":  # no module: old models' state_dict keys stay
                    layers.append(make_activation(act))
                width = h
            nets[e] = nn.Sequential(*layers)
            self.register_buffer(f"shift_{e}", torch.zeros(self.n_features[e]))
            self.register_buffer(f"factor_{e}", torch.ones(self.n_features[e]))
        self.nets = nn.ModuleDict(nets)
        # eV per atom, float64 in every model dtype (_apply)
        self.register_buffer("ref_energy", torch.zeros(len(self.elements), dtype=torch.float64))
        self.register_buffer("energy_scale", torch.ones(()))  # eV
        self.feature_offset = 0.0  # added after scaling (n2p2's Smin)
        self.scaling: dict[str, Any] | None = None
        if scaling is not None:
            self.set_scaling_from(scaling)

    def _apply(self, fn: Any, recurse: bool = True) -> HDNNP:
        """Moves and casts as :class:`~torch.nn.Module`'s, but ``ref_energy`` keeps float64
        in a model of another dtype (a float32 model): the reference energies are the large
        part of an absolute energy (1e4–5e5 eV per atom of a heavy element in all-electron
        codes), and float32 rounds them (and a structure's sum) to eV. The per-atom sum
        ``s · MLP + ref`` is then float64, so are the energies; forces and weights keep the
        model's dtype."""
        ref = self.ref_energy
        super()._apply(fn, recurse)
        moved = self._buffers["ref_energy"]
        if ref.dtype == torch.float64 and moved is not None and moved.dtype != torch.float64:
            self._buffers["ref_energy"] = ref.to(moved.device)
        return self

    def config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able): rebuild with ``HDNNP(**config)``."""
        scaling = {} if self.scaling is None else {"scaling": self.scaling}
        return {**self._config, **scaling}

    @classmethod
    def from_state(
        cls, config: Mapping[str, Any], state: Mapping[str, Any], dtype: torch.dtype | None = None
    ) -> HDNNP:
        """``HDNNP(**config)`` with the weights ``state`` in ``dtype`` (default: theirs), in
        eval mode. The caller's random numbers stay as they were (the layers' random
        initial weights, replaced by ``state``, are drawn from a forked generator)."""
        with torch.random.fork_rng(devices=[]):
            model = cls(**config).to(dtype or next(iter(state.values())).dtype)
        model.load_state_dict(state)
        return model.eval()

    def set_scaling(self, element: str, shift: np.ndarray, factor: np.ndarray) -> None:
        """Set the descriptor scaling of ``element`` (G' = (G − shift) · factor + offset)."""
        getattr(self, f"shift_{element}").copy_(torch.as_tensor(shift))
        getattr(self, f"factor_{element}").copy_(torch.as_tensor(factor))

    def set_scaling_from(self, scaling: Mapping[str, Any]) -> None:
        """Set every element's scaling from statistics (see the ``scaling`` parameter)."""
        mode = str(scaling.get("mode", "none"))
        smin, smax = float(scaling.get("smin", 0.0)), float(scaling.get("smax", 1.0))
        stats = scaling.get("statistics") or {}
        offset = 0.0
        for e in self.elements:
            if e not in stats:
                raise TrainingError(f"scaling statistics lack element {e}")
            if len(stats[e]["mean"]) != self.n_features[e]:
                raise TrainingError(
                    f"scaling statistics of {e} have {len(stats[e]['mean'])} features, "
                    f"the network {self.n_features[e]}"
                )
            shift, factor, offset = scaling_parameters(stats[e], mode, smin, smax)
            self.set_scaling(e, shift, factor)
        self.feature_offset = offset
        self.scaling = {
            "mode": mode,
            "smin": smin,
            "smax": smax,
            "statistics": {
                e: {k: [float(x) for x in stats[e][k]] for k in ("min", "max", "mean", "sigma")}
                for e in self.elements
            },
        }

    def atomic_energies(self, values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Energy of each atom, element → (n_e,) eV, from unscaled descriptors (n_e, F_e)."""
        out = {}
        for k, e in enumerate(self.elements):
            g = values.get(e)
            if g is None:
                continue
            x = (g - getattr(self, f"shift_{e}")) * getattr(self, f"factor_{e}")  # (n_e, F_e)
            if self.feature_offset != 0.0:
                x = x + self.feature_offset
            ei = self.nets[e](x).squeeze(1) * self.energy_scale
            # ref_energy[k] is 0-d: it would not promote ei, so ei is cast (float64)
            out[e] = ei.to(self.ref_energy.dtype) + self.ref_energy[k]
        return out

    def forward(
        self,
        values: Mapping[str, torch.Tensor],
        atom_index: Mapping[str, torch.Tensor],
        structure_index: torch.Tensor,
        n_structures: int,
    ) -> torch.Tensor:
        """Total energy per structure, (S,) eV, of ``values`` (element → (n_e, F_e)
        descriptors of its atoms) whose rows are the atoms ``atom_index`` (element → (n_e,)),
        in structures ``structure_index`` (N,) of ``n_structures`` S."""
        energies = None
        for e, ei in self.atomic_energies(values).items():
            if energies is None:
                energies = ei.new_zeros(n_structures)
            energies = energies.index_add(0, structure_index.index_select(0, atom_index[e]), ei)
        if energies is None:
            return self.ref_energy.new_zeros(n_structures)
        return energies


def _per_element(value: Any, elements: list[str], name: str, kind: type) -> dict[str, list]:
    """One list for every element, or element → list, as element → list."""
    if isinstance(value, Mapping):
        missing = [e for e in elements if e not in value]
        if missing:
            raise TrainingError(f"{name} lacks elements {missing}")
        return {e: [kind(x) for x in value[e]] for e in elements}
    if isinstance(value, str):
        raise TrainingError(f"{name} must be a list, got {value!r}")
    return {e: [kind(x) for x in value] for e in elements}


def _jsonable(value: Any, kind: type) -> Any:
    """A list, or element → list, as plain JSON-able data of ``kind``."""
    if isinstance(value, Mapping):
        return {str(k): [kind(x) for x in v] for k, v in value.items()}
    return [kind(x) for x in value]


#: File name of the trained model in a model directory.
MODEL = "model.pt"
#: The ``format`` key of a model file.
MODEL_FORMAT = "dparallel-hdnnp"


def model_file(
    model: HDNNP,
    spec: Mapping[str, Any],
    descriptor: dict | None,
    descriptor_kind: str,
) -> dict[str, Any]:
    """A model file's contents: config, weights, descriptor spec and kind, training spec."""
    return {
        "format": MODEL_FORMAT,
        "version": 1,
        "model_config": model.config(),
        "state_dict": model.state_dict(),
        "descriptor": descriptor,
        "descriptor_kind": descriptor_kind,
        "spec": dict(spec),
    }


def not_a_torch_file(path: Path) -> bool:
    """Whether ``path`` is a file that no ``torch.save`` wrote (a structure file, a log…):
    neither named ``*.pt`` (a broken one is then said to be broken) nor a zip archive as
    torch writes, so a model file renamed ``cu.pth`` or ``model.pt.bak`` still loads."""
    return path.is_file() and path.suffix != ".pt" and not zipfile.is_zipfile(path)


def file_not_model_dir(path: Path, accepts: str | None = None) -> str:
    """What is wrong with the file ``path`` given where a model directory is wanted;
    ``accepts``: the file the caller also takes in the directory's place (``model.pt``,
    ``deployed.pt``), else the hint names the folder of a model file."""
    if accepts is not None:
        hint = f" (with {accepts}) or its {accepts}"
    else:
        hint = f" ({path.parent})" if path.suffix == ".pt" else ""
    return (
        f"{path} is a file, not a model directory: give the folder that `dparallel train` "
        f"wrote{hint}"
    )


def resume_hint(model_dir: Path) -> str:
    """The command that finishes the training that stopped in ``model_dir``."""
    return f"`dparallel train STORE -o {model_dir} --resume`"


def load_model(
    path: str | os.PathLike[str], dtype: torch.dtype | None = None
) -> tuple[HDNNP, dict]:
    """Rebuild the :class:`HDNNP` from a ``model.pt`` (or a MODEL_DIR); returns (model, file)."""
    path = Path(path)
    if path.is_dir():
        path = path / MODEL
    elif not_a_torch_file(path):  # a structure file, a log, …
        raise TrainingError(file_not_model_dir(path, MODEL))
    if not path.is_file():
        if path.with_name("checkpoint.pt").is_file():  # a training stopped before its end
            raise TrainingError(
                f"no trained model at {path}: its training stopped before the end; finish "
                f"it with {resume_hint(path.parent)} (a new run without --resume would start "
                "again)"
            )
        raise TrainingError(f"no trained model at {path}; run `dparallel train` first")
    data = load_torch_file(path, "model file")
    if data.get("format") != MODEL_FORMAT:
        raise TrainingError(f"{path} is not a dparallel model file")
    return HDNNP.from_state(data["model_config"], data["state_dict"], dtype), data
