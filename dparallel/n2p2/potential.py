"""n2p2 potentials in and out: a directory with ``input.nn``, ``scaling.data`` and
``weights.XXX.data`` ⇄ a dparallel potential, the pair (:class:`ACSF`, :class:`HDNNP`).

n2p2 evaluates E = Σ_i [NN_e(s(G_i)) / conv_energy + mean_energy + atom_energy_e]; the HDNNP
expresses exactly that (``energy_scale = U / conv_energy``, ``ref_energy_e = U (mean_energy
+ atom_energy_e)``, n2p2's scaling and activations), U and L (the file's energy and length
units in eV and Å) coming from ``units``: n2p2 files do not say which units they use
(docs/n2p2.md).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from ase.data import atomic_numbers

from dparallel._files import claim_directory, remove_file, write_file
from dparallel.descriptors.registry import DescriptorKind, recorded_kind
from dparallel.errors import (
    ConfigError,
    DescriptorError,
    DParallelError,
    InputFormatError,
    SourceNotFoundError,
)
from dparallel.io.units import unit_factors
from dparallel.n2p2.input_nn import ACTIVATION_CODES, InputNN, read_input_nn
from dparallel.n2p2.scaling_data import COLUMNS, format_scaling_data, read_scaling_data
from dparallel.n2p2.weights import read_weights, weights_file_name, write_weights
from dparallel.nn import HDNNP, N2P2_EXPRESSIBLE, n2p2_files_missing
from dparallel.nn.folders import DATA_UNITS_JSON

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence

    from dparallel.descriptors import ACSF

__all__ = ["export_problems", "load_potential", "n2p2_problems", "write_potential"]

log = logging.getLogger(__name__)

_CODE_OF = {name: code for code, name in ACTIVATION_CODES.items()}
# dparallel scaling mode → (n2p2 type, Smin, Smax); None: the model's own
_N2P2_SCALING = {
    "none": ("none", 0.0, 0.0),
    "center": ("center", 0.0, 0.0),
    "center_sigma": ("scalesigma", 0.0, 1.0),
    "minmax": ("scale", -1.0, 1.0),
    "scale": None,
    "scalecenter": None,
    "scalesigma": None,
}
_KEYWORDS = {
    "scale": ["scale_symmetry_functions"],
    "center": ["center_symmetry_functions"],
    "scalecenter": ["scale_symmetry_functions", "center_symmetry_functions"],
    "scalesigma": ["scale_symmetry_functions_sigma"],
    "none": [],
}


def load_potential(
    directory: str | os.PathLike[str], units: str = "ase", dtype: torch.dtype = torch.float64
) -> tuple[ACSF, HDNNP]:
    """The (ACSF, HDNNP) pair of an n2p2 potential directory, in Å and eV.

    Parameters
    ----------
    directory
        Holds ``input.nn``, ``scaling.data`` and ``weights.XXX.data`` (XXX = atomic number).
    units
        The units the potential was made in (``"ase"``/``"angstrom-ev"`` or
        ``"bohr-hartree"``): n2p2 files do not record them.
    dtype
        dtype of the returned model.

    Raises
    ------
    SourceNotFoundError
        No ``scaling.data`` (:func:`dparallel.nn.n2p2_files_missing`, the message every
        command gives) or weights file.
    InputFormatError
        Whatever n2p2 would refuse, a 4G/Q potential (electrostatics), symmetry-function
        types other than 2/3/9, scaling or weights files that do not fit the input.nn.
    """
    d = Path(directory)
    length, energy = unit_factors(units)
    inp = read_input_nn(d / "input.nn")
    if inp.nnp_type != "2G":
        entry = inp._settings.get("nnp_type") if inp._settings is not None else None
        raise InputFormatError(
            f"nnp_type {inp.nnp_type}-HDNNP (charges, electrostatics) is not supported; "
            "dparallel imports short-range (2G) potentials",
            path=inp.path,
            line=None if entry is None else entry.line,
        )
    missing = n2p2_files_missing(d)
    if missing is not None:
        raise SourceNotFoundError(missing)
    acsf = inp.acsf(unit=length, order="n2p2")
    sigma = inp.scaling.type == "scalesigma"
    stats = read_scaling_data(d / "scaling.data", inp.n_symmetry_functions, sigma=sigma)
    model = _model(inp, stats)
    _warn_constant(inp, stats, d / "scaling.data")
    for e in inp.elements:
        sizes = [inp.n_symmetry_functions[e], *inp.networks[e].nodes, 1]
        layers = read_weights(d / weights_file_name(atomic_numbers[e]), sizes)
        linear = [m for m in model.nets[e].children() if isinstance(m, torch.nn.Linear)]
        with torch.no_grad():
            for lin, (w, b) in zip(linear, layers, strict=True):
                lin.weight.copy_(torch.from_numpy(w))
                lin.bias.copy_(torch.from_numpy(b))
    norm = inp.normalization
    mean, conv = (0.0, 1.0) if norm is None else (norm.mean_energy, norm.conv_energy)
    model.energy_scale.fill_(energy / conv)
    ref = [energy * (mean + inp.atom_energy[e]) for e in inp.elements]
    model.ref_energy.copy_(torch.tensor(ref, dtype=torch.float64))
    return acsf, model.to(dtype).eval()


def _warn_constant(inp: InputNN, stats: dict[str, np.ndarray], path: Path) -> None:
    """Warn where n2p2's scaling divides by zero (its energies would be NaN there): constant
    functions, and Smin = Smax (a zero factor, which its angular groups divide by)."""
    kind = inp.scaling.type
    if kind not in ("scale", "scalecenter", "scalesigma"):
        return
    if inp.scaling.smin == inp.scaling.smax:
        log.warning(
            "%s: scale_min_short = scale_max_short = %g: every scaled symmetry function is "
            "that constant; n2p2's angular symmetry-function groups divide by the zero "
            "scaling factor (NaN energies and forces), dparallel's results are finite",
            inp.path,
            inp.scaling.smin,
        )
    for e, table in stats.items():
        denom = table[:, 3] if kind == "scalesigma" else table[:, 1] - table[:, 0]
        zero = np.flatnonzero(denom == 0.0)
        if zero.size:
            log.warning(
                "%s: element %s, functions %s are constant: n2p2 divides by zero scaling "
                "them; dparallel uses the factor Smax - Smin instead",
                path,
                e,
                (zero + 1).tolist(),
            )


def _model(inp: InputNN, stats: dict[str, np.ndarray]) -> HDNNP:
    """The HDNNP skeleton of ``inp`` with the scaling of ``stats`` (float64)."""
    scaling = {
        "mode": inp.scaling.type,
        "smin": inp.scaling.smin,
        "smax": inp.scaling.smax,
        "statistics": {
            e: {k: stats[e][:, c].tolist() for c, k in enumerate(COLUMNS)} for e in inp.elements
        },
    }
    with torch.random.fork_rng(devices=[]):  # random initial weights, replaced by the files'
        model = HDNNP(
            inp.elements,
            inp.n_symmetry_functions,
            hidden={e: list(n.nodes) for e, n in inp.networks.items()},
            activations={e: n.activation_names() for e, n in inp.networks.items()},
            normalize_nodes=inp.normalize_nodes,
        ).double()
    model.set_scaling_from(scaling)  # after .double(): float32 buffers would round it
    return model


def n2p2_problems(acsf: ACSF, model: HDNNP) -> list[str]:
    """Why n2p2 cannot evaluate (``acsf``, ``model``) exactly; empty when it can."""
    problems = []
    if sorted(model.elements) != sorted(acsf.elements):
        problems.append(
            f"the network elements {model.elements} differ from the descriptor's "
            f"{acsf.elements} (n2p2 needs one network per element of input.nn)"
        )
        return problems
    cutoffs = {(f["cutoff"], f["alpha"]) for e in acsf.elements for f in acsf.features(e)}
    if len(cutoffs) > 1:
        problems.append(
            f"n2p2 uses one cutoff_type for all symmetry functions; these use {sorted(cutoffs)}"
        )
    problems += _function_problems(acsf)
    for e in acsf.elements:
        if acsf.n_features(e) == 0:
            problems.append(f"element {e} has no symmetry functions")
        elif acsf.n_features(e) != model.n_features[e]:
            problems.append(f"element {e}: the network has {model.n_features[e]} inputs")
    depth = {len(model.hidden[e]) for e in model.elements}
    if 0 in depth:
        problems.append("n2p2 networks need at least one hidden layer")
    if len(depth) > 1:
        problems.append(f"n2p2 cannot mix network depths per element, got {sorted(depth)}")
    if len({model.hidden[e][-1] for e in model.elements if model.hidden[e]}) > 1:
        problems.append(
            "n2p2's element_nodes_short cannot set the last hidden layer (Mode.cpp), so "
            "every element needs the same last hidden layer size"
        )
    if len({model.activations[e][-1] for e in model.elements}) > 1:
        problems.append("n2p2 has one output activation for all elements")
    if len(model.elements) - _most_common(model.activations, model.elements)[1] > 1:
        problems.append(
            "n2p2 allows one element_activation_short line (a repeat is a critical "
            "problem in Settings.cpp), so at most one element may differ in activations"
        )
    for e in model.elements:
        for a in model.activations[e]:
            if a not in N2P2_EXPRESSIBLE:
                why = (
                    "torch's softplus is linear above 20, n2p2's above 35: train with "
                    "'softplus_n2p2'"
                    if a == "softplus"
                    else "n2p2 has no such activation"
                )
                problems.append(f"activation {a!r} of element {e}: {why}")
    scale = float(model.energy_scale)
    if not (math.isfinite(scale) and scale != 0.0):
        problems.append(f"energy scale {scale} cannot be written as conv_energy")
    for name, t in model.state_dict().items():
        if t.is_floating_point() and not torch.isfinite(t).all():
            problems.append(f"{name} holds non-finite values")
    return list(dict.fromkeys(problems))


def _function_problems(acsf: ACSF) -> list[str]:
    """The symmetry functions n2p2 computes other than dparallel (docs/n2p2.md): an angular
    function's rs < 0 (n2p2's symmetry-function groups take it as 0) and zeta or lambda 0
    (n2p2's forces are NaN: the groups divide by zeta·lambda)."""
    problems = []
    for e in acsf.elements:
        for k, f in enumerate(acsf.features(e)):
            if f["type"] == 2:
                continue
            name = (
                f"symmetry function {k} of {e} (type {f['type']}, {'-'.join(f['neighbors'])}, "
                f"eta {f['eta']:g}, rs {f['rs']:g}, zeta {f['zeta']:g}, lambda "
                f"{f['lambda']:g}, rc {f['rc']:g}; Å)"
            )
            if f["rs"] < 0:
                problems.append(
                    f"{name}: n2p2 computes an angular function's rs < 0 as rs = 0, dparallel "
                    "with the rs given; use rs >= 0"
                )
            if f["zeta"] == 0 or f["lambda"] == 0:
                problems.append(
                    f"{name}: n2p2's forces are NaN with zeta or lambda 0 (its "
                    "symmetry-function groups divide by zeta·lambda); remove the function"
                )
    return problems


def write_potential(
    acsf: ACSF,
    model: HDNNP,
    out_dir: str | os.PathLike[str],
    units: str = "ase",
    *,
    protect: Sequence[str | os.PathLike[str]] = (),
) -> dict[str, Any]:
    """Write ``input.nn``, ``scaling.data`` and ``weights.XXX.data`` that n2p2 evaluates
    to this potential's energies and forces (in ``units``, default Å and eV; columns in
    n2p2's sorted symmetry-function order whatever the ACSF's ``order``); returns a report:
    the files, the units and LAMMPS ``pair_style hdnnp`` lines.

    ``out_dir`` must be new, empty, an earlier export of dparallel's (its marker
    ``.dparallel-n2p2.json``, or only these files) and not be or hold a ``protect`` path;
    an earlier export's files are all replaced (weights of elements no longer there too;
    a ``lammps.model`` made from them by ``dparallel export DIR`` is removed).

    Raises
    ------
    ConfigError
        n2p2 cannot express the model (:func:`n2p2_problems` lists why).
    """
    problems = n2p2_problems(acsf, model)
    if problems:
        raise ConfigError("n2p2 cannot express this model:\n  " + "\n  ".join(problems))

    length, energy = unit_factors(units)
    out = Path(out_dir)
    claim_directory(out, _MARKER, "n2p2 export", protect=protect, adopt=_earlier_export)
    for old in out.glob("weights.*.data"):  # an earlier model's, other elements too
        remove_file(old, root=out)
    remove_file(out / "lammps.model", root=out)  # `dparallel export` of the earlier files
    elements = sorted(acsf.elements, key=lambda s: atomic_numbers[s])
    kind, smin, smax, tables = _scaling_tables(acsf, model, elements)
    files = []
    for e in elements:
        perm = acsf.n2p2_order(e)
        layers = [
            (lin.weight.detach().double().numpy(), lin.bias.detach().double().numpy())
            for lin in model.nets[e].children()
            if isinstance(lin, torch.nn.Linear)
        ]
        layers[0] = (layers[0][0][:, perm], layers[0][1])
        name = weights_file_name(atomic_numbers[e])
        write_weights(out / name, layers)
        files.append(name)
    write_file(out / "scaling.data", format_scaling_data(tables), durable=True)
    text = _input_nn_text(acsf, model, elements, (kind, smin, smax), (units, length, energy))
    write_file(out / "input.nn", text, durable=True)
    return {
        "directory": str(out),
        "files": ["input.nn", "scaling.data", *files],
        "units": units,
        "lammps": lammps_lines(out, elements, acsf.r_cut, length, energy),
    }


def _most_common(per_element: dict[str, list], elements: list[str]) -> tuple[list, int]:
    """The value most elements share (first in ``elements`` on ties) and how many share it."""
    values = [per_element[e] for e in elements]
    best = max(values, key=values.count)
    return best, values.count(best)


def lammps_lines(
    directory: Path, elements: list[str], r_cut: float, length: float, energy: float
) -> list[str]:
    """``pair_style hdnnp`` / ``pair_coeff`` lines for LAMMPS ``units metal`` (Å, eV):
    ``cflength`` multiplies LAMMPS lengths into the potential's, ``cfenergy`` divides its
    energies into LAMMPS's (n2p2 ``InterfaceLammps``; both 1 in Å and eV); the cutoff, in
    LAMMPS units, must be ≥ the largest symmetry-function cutoff."""
    cut = f"{math.ceil(r_cut * 1e4 - 1e-6) / 1e4:g}"  # rounded up: LAMMPS refuses a smaller one
    opts = "showew no showewsum 100 resetew yes maxew 1000"
    if length != 1.0 or energy != 1.0:
        opts += f" cflength {1.0 / length:.15g} cfenergy {1.0 / energy:.15g}"
    return [
        "units metal",
        f'pair_style hdnnp {cut} dir "{directory}" {opts}',
        f"pair_coeff * * {' '.join(elements)}    # LAMMPS atom types 1..{len(elements)}",
    ]


def _scaling_tables(
    acsf: ACSF, model: HDNNP, elements: list[str]
) -> tuple[str, float, float, list[np.ndarray]]:
    """n2p2 scaling type, Smin, Smax and (F, 4) rows per element that reproduce the model."""
    info = model.scaling or {}
    mode = info.get("mode")
    offset = float(model.feature_offset)
    shifts = {e: getattr(model, f"shift_{e}").detach().double().numpy() for e in elements}
    factors = {e: getattr(model, f"factor_{e}").detach().double().numpy() for e in elements}
    if mode in _N2P2_SCALING:
        mapped = _N2P2_SCALING[mode]
        kind, smin, smax = mapped if mapped else (mode, info["smin"], info["smax"])
    elif all((shifts[e] == 0).all() and (factors[e] == 1).all() for e in elements):
        kind, smin, smax = "none", 0.0, 0.0
    elif all((factors[e] == 1).all() for e in elements):
        kind, smin, smax = "center", 0.0, 0.0
    else:
        kind, smin, smax = "scalesigma", offset, offset + 1.0
    if kind in ("none", "center") and offset != 0.0:
        kind, smin, smax = "scalesigma", offset, offset + 1.0
    stats = info.get("statistics") or {}
    tables = []
    adjusted = 0
    for e in elements:
        perm = acsf.n2p2_order(e)
        n = model.n_features[e]
        if e in stats:
            table = np.stack([np.asarray(stats[e][k], np.float64) for k in COLUMNS], 1)
        else:
            table = np.tile([-1e300, 1e300, 0.0, 1.0], (n, 1))
        table, changed = _fit_rows(table, shifts[e], factors[e], offset, kind, smin, smax)
        adjusted += changed
        tables.append(table[perm])
    if not stats:
        log.warning(
            "the model carries no descriptor statistics: scaling.data gets min/max of "
            "±1e300, so n2p2/LAMMPS extrapolation warnings never fire"
        )
    if adjusted:
        log.info(
            "%d scaling.data entries set from the model's scaling (constant features) "
            "instead of the statistics, so n2p2 scales exactly as the model",
            adjusted,
        )
    return kind, smin, smax, tables


def _fit_rows(
    table: np.ndarray,
    shift: np.ndarray,
    factor: np.ndarray,
    offset: float,
    kind: str,
    smin: float,
    smax: float,
) -> tuple[np.ndarray, int]:
    """Rows (min, max, mean, sigma) with which n2p2's ``kind`` maps G as the model does.

    The model computes (G − shift)·factor + offset, n2p2 Smin + f'(G − c'); so f' = factor
    and c' = shift + (Smin − offset)/factor. The statistics are kept where they give that
    (to 1e-13) and replaced where they do not (features the model holds constant).
    """
    t = table.copy()
    if kind == "none":
        return t, 0
    centre = shift if smin == offset else shift + (smin - offset) / factor
    col = 0 if kind == "scale" else 2  # the value n2p2 subtracts
    changed = ~np.isclose(t[:, col], centre, rtol=1e-13, atol=0.0)
    t[changed, col] = centre[changed]
    if kind == "center":
        return t, int(changed.sum())
    span = smax - smin
    with np.errstate(divide="ignore", invalid="ignore"):
        width = t[:, 3] if kind == "scalesigma" else t[:, 1] - t[:, 0]
        off = ~np.isclose(span / width, factor, rtol=1e-13, atol=0.0)
    if kind == "scalesigma":
        t[off, 3] = span / factor[off]
    else:
        t[off, 1] = t[off, 0] + span / factor[off]
    return t, int((changed | off).sum())


def _input_nn_text(
    acsf: ACSF,
    model: HDNNP,
    elements: list[str],
    scaling: tuple[str, float, float],
    file_units: tuple[str, float, float],
) -> str:
    """The input.nn of the exported potential: ``scaling`` (kind, smin, smax), file units
    (name, L, U: lengths / L, energies / U)."""
    kind, smin, smax = scaling
    units, length, energy = file_units

    def num(x: float) -> str:
        return f"{x:.17g}"

    lines = [
        "# n2p2 potential written by dparallel (dparallel export --format n2p2).",
        f"# Units: {units} (lengths × {num(length)} Å, energies × {num(energy)} eV).",
        f"number_of_elements {len(elements)}",
        f"elements {' '.join(elements)}",
    ]
    ref = model.ref_energy.detach().double().tolist()
    for e in elements:
        lines.append(f"atom_energy {e} {num(ref[model.elements.index(e)] / energy)}")
    cutoff, alpha = acsf.features(elements[0])[0]["cutoff"], acsf.features(elements[0])[0]["alpha"]
    from dparallel.kernels.cutoff_types import cutoff_type_id

    lines.append(f"cutoff_type {cutoff_type_id(cutoff)} {num(alpha)}")
    scale = float(model.energy_scale)
    if scale != energy:  # NN output × scale / U → n2p2: NN / conv_energy
        lines += ["mean_energy 0", f"conv_energy {num(energy / scale)}", "conv_length 1"]
    lines += _KEYWORDS[kind]
    if kind in ("scale", "scalecenter", "scalesigma"):
        lines += [f"scale_min_short {num(smin)}", f"scale_max_short {num(smax)}"]
    hidden = _most_common(model.hidden, elements)[0]
    acts = _most_common(model.activations, elements)[0]
    codes = [_CODE_OF[a] for a in acts]
    lines += [
        f"global_hidden_layers_short {len(hidden)}",
        f"global_nodes_short {' '.join(map(str, hidden))}",
        f"global_activation_short {' '.join(codes)}",
    ]
    for e in elements:
        if model.hidden[e][:-1] != hidden[:-1]:
            lines.append(f"element_nodes_short {e} {' '.join(map(str, model.hidden[e]))}")
        if model.activations[e][:-1] != acts[:-1]:
            hidden_codes = " ".join(_CODE_OF[a] for a in model.activations[e])
            lines.append(f"element_activation_short {e} {hidden_codes}")
    if model.normalize_nodes:
        lines.append("normalize_nodes")
    lines.append("use_short_forces")
    lines.append("random_seed 1  # not used in evaluation; nnp-scaling and nnp-train need one")
    for e in elements:
        for k in acsf.n2p2_order(e):
            f = acsf.features(e)[k]
            eta, rs, rc = f["eta"] * length**2, f["rs"] / length, f["rc"] / length
            if f["type"] == 2:
                params = f"{f['neighbors'][0]} {num(eta)} {num(rs)} {num(rc)}"
            else:
                a, b = f["neighbors"]
                params = (
                    f"{a} {b} {num(eta)} {num(f['lambda'])} {num(f['zeta'])} {num(rc)} {num(rs)}"
                )
            lines.append(f"symfunction_short {e} {f['type']} {params}")
    return "\n".join(lines) + "\n"


def export_model_dir(
    model_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None = None,
    units: str = "ase",
) -> dict[str, Any]:
    """``dparallel export MODEL_DIR --format n2p2``: the trained model as an n2p2 potential.

    Writes to ``out_dir`` (default ``MODEL_DIR/n2p2``); see :func:`write_potential`. The
    model's ``data_units.json`` goes beside its files (an earlier one is removed where the
    model has none), so ``dparallel evaluate`` reads new data of the kind it was trained
    from in their units, as with the model directory: without it, a Bohr/Hartree file was
    read as Å/eV, silently.
    """
    acsf, model = _trained_acsf(model_dir)
    folder = Path(model_dir) if Path(model_dir).is_dir() else Path(model_dir).parent
    out = Path(out_dir) if out_dir is not None else folder / "n2p2"
    model_file = Path(model_dir) / "model.pt" if Path(model_dir).is_dir() else Path(model_dir)
    report = write_potential(acsf, model, out, units=units, protect=[model_file])
    remove_file(out / DATA_UNITS_JSON, root=out)
    if (folder / DATA_UNITS_JSON).is_file():
        write_file(out / DATA_UNITS_JSON, (folder / DATA_UNITS_JSON).read_text(), durable=True)
        report["files"].append(DATA_UNITS_JSON)
    return report


def export_problems(model_dir: str | os.PathLike[str]) -> list[str]:
    """Why ``dparallel export MODEL_DIR --format n2p2`` would refuse ``model_dir``'s model
    (empty when it can write it)."""
    try:
        acsf, model = _trained_acsf(model_dir)
    except DParallelError as exc:  # another descriptor type, or no readable model
        return [str(exc)]
    return n2p2_problems(acsf, model)


def _trained_acsf(model_dir: str | os.PathLike[str]) -> tuple[ACSF, HDNNP]:
    """The ACSF and network of a trained model; a :class:`ConfigError` for another type."""
    from dparallel.nn import load_model

    model, data = load_model(model_dir, dtype=torch.float64)
    try:
        kind: DescriptorKind | None = recorded_kind(data)
    except DescriptorError:  # a type not registered here
        kind = None
    if kind is None or not kind.n2p2 or not data.get("descriptor"):
        raise ConfigError(
            f"{model_dir}: n2p2 potentials use ACSF descriptors; this model uses "
            f"{data.get('descriptor_kind')!r}: run it through `dparallel export {model_dir}` "
            "(dparallel.ase.Calculator, the plain-torch files), or train with ACSF for n2p2"
        )
    return kind.from_dict(data["descriptor"]), model


#: The file that marks a folder as a dparallel n2p2 export.
_MARKER = ".dparallel-n2p2.json"


def _earlier_export(names: set[str]) -> bool:
    """An export written before markers: input.nn, scaling.data and weights files only."""
    import fnmatch

    allowed = ("input.nn", "scaling.data", "weights.*.data")
    return "input.nn" in names and all(
        any(fnmatch.fnmatchcase(n, p) for p in allowed) for n in names
    )
