"""A whole n2p2 ``input.nn`` as validated data: :func:`read_input_nn` → :class:`InputNN`.

Elements, atom energies, cutoff and symmetry functions, scaling (n2p2's precedence),
normalisation, the short-range networks (n2p2's exact algorithm, including what it
refuses) and the training keywords with a counterpart in :class:`dparallel.train.TrainingSpec`,
as ``libnnp/Mode.cpp`` reads them (docs/n2p2.md). Every other keyword is listed once in a
logged warning: nothing is dropped silently.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dparallel.errors import InputFormatError
from dparallel.n2p2._text import c_number
from dparallel.n2p2.settings import Settings, log_unused, read_settings
from dparallel.n2p2.symmetry_functions import acsf_of, cutoff_of, elements_of, symmetry_functions

if TYPE_CHECKING:
    from pathlib import Path

    from dparallel.descriptors.acsf import ACSF


log = logging.getLogger(__name__)

#: n2p2 activation code → dparallel activation name (``NeuralNetwork.cpp``).
ACTIVATION_CODES: dict[str, str] = {
    "l": "identity",
    "t": "tanh",
    "s": "logistic",
    "p": "softplus_n2p2",
    "r": "relu",
    "g": "gaussian",
    "c": "cos",
    "S": "revlogistic",
    "e": "exp",
    "h": "harmonic",
}

#: n2p2 symmetry-function scaling types (``SymFnc::ScalingType``), dparallel names.
SCALING_TYPES = ("none", "scale", "center", "scalecenter", "scalesigma")


@dataclass(frozen=True)
class Network:
    """One element's short-range network: hidden sizes and n2p2 activation codes.

    ``activations`` has one code per hidden layer plus the output layer.
    """

    nodes: tuple[int, ...]
    activations: tuple[str, ...]

    def activation_names(self) -> list[str]:
        """dparallel names of :attr:`activations` (see :data:`ACTIVATION_CODES`)."""
        return [ACTIVATION_CODES[c] for c in self.activations]


@dataclass(frozen=True)
class Scaling:
    """n2p2 symmetry-function scaling: type (:data:`SCALING_TYPES`) and [Smin, Smax]."""

    type: str = "none"
    smin: float = 0.0
    smax: float = 1.0


@dataclass(frozen=True)
class Normalization:
    """n2p2 normalisation: E_int = (E − N·mean_energy)·conv_energy, r_int = r·conv_length."""

    mean_energy: float
    conv_energy: float
    conv_length: float


@dataclass(frozen=True)
class InputNN:
    """Everything of an n2p2 ``input.nn`` that dparallel uses (file units)."""

    path: Path
    elements: list[str]
    atom_energy: dict[str, float]
    cutoff_type: int
    cutoff_alpha: float
    n_symmetry_functions: dict[str, int]
    scaling: Scaling
    normalization: Normalization | None
    networks: dict[str, Network]
    normalize_nodes: bool
    nnp_type: str
    unused: list[str] = field(default_factory=list)
    _settings: Settings | None = field(default=None, repr=False, compare=False)

    def acsf(self, unit: float | str = 1.0, order: str = "n2p2") -> ACSF:
        """The symmetry functions as an :class:`~dparallel.descriptors.ACSF` (lengths × unit)."""
        assert self._settings is not None
        return acsf_of(self._settings, unit, order)

    def training_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`dparallel.train.TrainingSpec` this file implies (seed,
        split, epochs, force weight, Adam or n2p2's Kalman filter with its parameters, one
        network for every element, the scaling, ``init_from`` this file's folder for
        ``use_old_weights_short``; docs/n2p2.md), ``n2p2_compatible: true``."""
        s = self._settings
        assert s is not None
        out: dict[str, Any] = {"n2p2_compatible": True}
        for key, name, kind in (
            ("random_seed", "seed", int),
            ("test_fraction", "test_fraction", float),
            ("epochs", "epochs", int),
        ):
            entry = s.get(key)
            if entry is not None:
                out[name] = kind(_number(s, entry, float))
        if not s.has("use_short_forces"):
            out["force_weight"] = 0.0
        updater, gradient = s.get("updater_type"), s.get("gradient_type")
        adam = gradient is not None and gradient.words == ["1"]
        if updater is not None and updater.words == ["0"] and adam:
            out["optimizer"] = "adam"
            eta = s.get("gradient_adam_eta")
            if eta is not None:
                out["lr"] = _number(s, eta, float)
        kalman = s.get("kalman_type")
        if (
            updater is not None
            and updater.words == ["1"]
            and (kalman is None or kalman.words == ["0"])
        ):
            out["optimizer"] = "kalman"  # n2p2's standard Kalman filter, same parameters
            for key in ("epsilon", "q0", "qtau", "qmin", "eta", "etatau", "etamax"):
                entry = s.get(f"kalman_{key}")
                if entry is not None:
                    out[f"kalman_{key}"] = _number(s, entry, float)
            ratio = s.get("force_energy_ratio")  # force updates (one component) per energy update
            if ratio is not None:
                out["kalman_force_components"] = max(1, round(_number(s, ratio, float)))
        nets = set(self.networks.values())
        if len(nets) == 1:
            net = nets.pop()
            hidden_acts = set(net.activations[:-1])
            if len(hidden_acts) == 1 and net.activations[-1] == "l":
                out["hidden"] = list(net.nodes)
                out["activation"] = ACTIVATION_CODES[hidden_acts.pop()]
        out["scaling"] = self.scaling.type
        out["scale_min"], out["scale_max"] = self.scaling.smin, self.scaling.smax
        if s.has("use_old_weights_short"):  # n2p2 asks only whether it is there
            out["init_from"] = str(self.path.parent)  # weights.XXX.data and scaling.data
        return out


def read_input_nn(path: str | Path) -> InputNN:
    """Read and check a whole n2p2 ``input.nn``; errors name the file and line.

    Raises
    ------
    InputFormatError
        Whatever n2p2 itself refuses (missing ``cutoff_type``/``elements``, repeated
        once-only keywords, inconsistent network keywords, unknown activation codes…)
        and symmetry functions dparallel does not compute (types other than 2, 3, 9).
    """
    s = read_settings(path)
    elements = elements_of(s)
    cutoff_type, cutoff_alpha = cutoff_of(s)
    _, feats = symmetry_functions(s, unit=None)  # the units come with acsf(unit)
    n_sf = {e: len(feats[e]) for e in elements}
    nnp_type = _nnp_type(s)
    unused = log_unused(s)
    return InputNN(
        path=s.path,
        elements=elements,
        atom_energy=_atom_energy(s, elements),
        cutoff_type=cutoff_type,
        cutoff_alpha=cutoff_alpha,
        n_symmetry_functions=n_sf,
        scaling=_scaling(s),
        normalization=_normalization(s),
        networks=_networks(s, elements, n_sf),
        normalize_nodes=s.has("normalize_nodes"),
        nnp_type=nnp_type,
        unused=unused,
        _settings=s,
    )


def _number(s: Settings, entry: Any, kind: type = float, word: int = 0) -> Any:
    """Word ``word`` of a line as ``kind``; error names the line."""
    if len(entry.words) <= word:
        raise s.fail(entry, f"expected a number as value {word + 1}")
    try:
        return c_number(entry.words[word], kind)
    except ValueError as exc:
        raise s.fail(entry, f"value {word + 1}: {exc}") from None


def _nnp_type(s: Settings) -> str:
    """'2G' (short range) unless ``nnp_type`` says 4G or Q."""
    entry = s.get("nnp_type")
    if entry is None:
        return "2G"
    value = entry.words[0] if entry.words else ""
    names = {"2G-HDNNP": "2G", "4G-HDNNP": "4G", "Q-HDNNP": "Q", "2": "2G", "4": "4G", "5": "Q"}
    if value not in names:
        raise s.fail(entry, "unknown nnp_type (n2p2 knows 2G-HDNNP, 4G-HDNNP, Q-HDNNP)")
    return names[value]


def _atom_energy(s: Settings, elements: list[str]) -> dict[str, float]:
    """Per-element energy offsets (0 where not given; a repeated element: last wins, as n2p2)."""
    out = {e: 0.0 for e in elements}
    for entry in s.values("atom_energy"):
        if len(entry.words) < 2:
            raise s.fail(entry, "expected 'atom_energy <element> <energy>'")
        out[_element_word(s, entry, elements)] = _number(s, entry, float, 1)
    return out


def _scaling(s: Settings) -> Scaling:
    """n2p2's scaling type (``Mode::setupSymmetryFunctionScaling``) and Smin/Smax."""
    scale, center = s.has("scale_symmetry_functions"), s.has("center_symmetry_functions")
    sigma = s.has("scale_symmetry_functions_sigma")
    kinds = {(True, True): "scalecenter", (True, False): "scale", (False, True): "center"}
    kind = kinds.get((scale, center), "scalesigma" if sigma else "none")
    if sigma and kind != "scalesigma":
        log.warning(
            "%s: scale_symmetry_functions_sigma is ignored next to scale/center keywords "
            "(n2p2's precedence: scaling type %r)",
            s.path,
            kind,
        )
    smin = smax = 0.0
    if kind in ("scale", "scalecenter", "scalesigma"):
        lo, hi = s.get("scale_min_short"), s.get("scale_max_short")
        smin = 0.0 if lo is None else _number(s, lo)
        smax = 1.0 if hi is None else _number(s, hi)
    return Scaling(kind, smin, smax)


def _normalization(s: Settings) -> Normalization | None:
    """mean_energy, conv_energy, conv_length: all or none (n2p2 refuses a mix)."""
    keys = ("mean_energy", "conv_energy", "conv_length")
    found = {k: s.get(k) for k in keys}
    if all(found.values()):
        values = {k: _number(s, e) for k, e in found.items()}
        for k in ("conv_energy", "conv_length"):
            if values[k] == 0.0:
                raise s.fail(found[k], f"{k} must not be 0")  # type: ignore[arg-type]
        return Normalization(**values)
    if any(found.values()) or s.has("conv_charge"):
        given = [k for k in (*keys, "conv_charge") if s.has(k)]
        raise InputFormatError(
            f"incorrect usage of normalization keywords (found {', '.join(given)}): use all "
            "or none of mean_energy, conv_energy and conv_length (n2p2 stops here too)",
            path=s.path,
        )
    return None


def _networks(s: Settings, elements: list[str], n_sf: dict[str, int]) -> dict[str, Network]:
    """Per-element topology, exactly as ``Mode::setupNeuralNetwork`` builds it."""
    layers, global_hidden = _layer_counts(s, elements)
    nodes = [[0] * n for n in layers]
    acts: list[list[str | None]] = [[None] * n for n in layers]
    g_nodes: list[str] = []
    nodes_entry = s.get("global_nodes_short")
    if nodes_entry is not None:
        g_nodes = nodes_entry.words
        if len(g_nodes) != global_hidden:
            raise s.fail(
                nodes_entry, f"inconsistent with global_hidden_layers_short {global_hidden}"
            )
    g_acts: list[str] = []
    entry = s.get("global_activation_short")
    if entry is not None:
        g_acts = entry.words
        if len(g_acts) - 1 != global_hidden:
            raise s.fail(
                entry,
                f"needs {global_hidden + 1} codes (hidden layers + output layer), "
                f"got {len(g_acts)}",
            )
        _check_codes(s, entry, g_acts)
    for i, e in enumerate(elements):
        nodes[i][0], acts[i][0], nodes[i][-1] = n_sf[e], "l", 1
        if layers[i] == global_hidden + 2:  # the global keywords set every layer of it
            if g_nodes:
                nodes[i][1:-1] = [_int_word(s, nodes_entry, w) for w in g_nodes]
            if g_acts:
                acts[i][1:] = g_acts
    for entry in s.values("element_nodes_short"):
        i = elements.index(_element_word(s, entry, elements))
        args = entry.words
        if layers[i] != len(args) - 1 + 2:
            raise s.fail(entry, "inconsistent per-element topology")
        for j in range(1, layers[i] - 2):  # n2p2 sets all but the last hidden layer here
            nodes[i][j] = _int_word(s, entry, args[j])
    for entry in s.values("element_activation_short"):
        i = elements.index(_element_word(s, entry, elements))
        args = entry.words
        if layers[i] != len(args) - 1 + 1:
            raise s.fail(entry, "inconsistent per-element topology")
        _check_codes(s, entry, args[1:])
        for j in range(1, layers[i] - 1):
            acts[i][j] = args[j]
    return _checked_networks(s, elements, nodes, acts)


def _layer_counts(s: Settings, elements: list[str]) -> tuple[list[int], int]:
    """Layers per element (hidden + input + output) and the global hidden-layer count."""
    entry = s.get("global_hidden_layers_short")
    global_hidden = 0 if entry is None else _number(s, entry, int)
    layers = [0 if entry is None else global_hidden + 2] * len(elements)
    for entry in s.values("element_hidden_layers_short"):
        layers[elements.index(_element_word(s, entry, elements))] = _number(s, entry, int, 1) + 2
    if any(n <= 2 for n in layers):
        raise InputFormatError(
            "number of hidden layers unset (or < 1) for some elements: give "
            "global_hidden_layers_short (n2p2 needs at least one hidden layer)",
            path=s.path,
        )
    return layers, global_hidden


def _checked_networks(
    s: Settings, elements: list[str], nodes: list[list[int]], acts: list[list[str | None]]
) -> dict[str, Network]:
    """The networks of the per-layer neurons and activations, every layer set (as n2p2)."""
    out = {}
    for i, e in enumerate(elements):
        for j in range(len(nodes[i])):
            if j == 0 and nodes[i][0] == 0:
                raise InputFormatError(
                    f"element {e} has no symmetry functions, so its network has no inputs",
                    path=s.path,
                )
            missing = "neurons" if nodes[i][j] <= 0 else "activation" if not acts[i][j] else ""
            if missing:
                raise InputFormatError(
                    f"network of element {e}: {missing} of layer {j} unset (n2p2 stops here "
                    "too); check global_nodes_short, global_activation_short and the "
                    "element_*_short keywords",
                    path=s.path,
                )
        out[e] = Network(tuple(nodes[i][1:-1]), tuple(str(a) for a in acts[i][1:]))
    return out


def _element_word(s: Settings, entry: Any, elements: list[str]) -> str:
    """First word of a per-element keyword, checked against the elements."""
    e = entry.words[0] if entry.words else ""
    if e not in elements:
        raise s.fail(entry, f"element {e!r} is not in the elements line {elements}")
    return e


def _int_word(s: Settings, entry: Any, word: str) -> int:
    """A layer size; the error names the line."""
    try:
        return int(c_number(word, int))
    except ValueError:
        raise s.fail(entry, f"layer size {word!r} is not an integer") from None


def _check_codes(s: Settings, entry: Any, codes: list[str]) -> None:
    """Every activation code must be one n2p2 knows."""
    bad = [c for c in codes if c not in ACTIVATION_CODES]
    if bad:
        raise s.fail(
            entry,
            f"unknown activation function {bad[0]!r} (n2p2 knows {' '.join(ACTIVATION_CODES)})",
        )
