"""``lammps.model``: a trained ACSF potential as plain text for ``pair_style dparallel``.

The LAMMPS pair style (``dparallel/lammps/src``, docs/lammps.md) reads this file from
MODEL_DIR; it needs no Python, torch or dparallel at run time. Floats are written with
``repr`` (shortest round-trip form), so the C++ ``strtod`` reads back the very doubles the
model holds. Layout (whitespace-separated tokens; ``#`` starts a comment)::

    dparallel-lammps-model 1
    elements <n> <symbol>...              # descriptor elements, in its order
    cutoff <r>                            # largest rc of any function, Å
    element <symbol> <has network 0|1>    # one block per element
      features <F>
      sf <type> <e1> <e2> <eta> <rs> <zeta> <lambda> <rc> <cutoff type> <alpha>   # F lines
      scaling <offset>                    # then F lines: <shift> <factor> <min> <max>
      network <energy scale> <reference energy> <n layers>
        layer <n in> <n out> <activation> <divide 0|1>   # then n out rows of n in weights,
                                                         # then one row of n out biases
    end

``e1``/``e2`` index ``elements`` (−1: none, for radial functions' ``e2``); ``zeta`` and
``lambda`` are 0 for radial functions. The atomic energy is
E_i = ref + scale · MLP((G_i − shift) · factor + offset), as
:class:`dparallel.nn.HDNNP`; ``min``/``max`` are the training range of each function
(``nan`` when the model has no statistics) for the extrapolation count. A model the pair
style cannot run gets a file holding only ``unsupported <reason>``, so ``pair_coeff``
can say why.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from dparallel._files import write_file
from dparallel.kernels.cutoff_types import cutoff_type_id

if TYPE_CHECKING:
    from pathlib import Path

    from dparallel.nn import HDNNP

#: File name of the model that ``pair_style dparallel`` reads from MODEL_DIR.
LAMMPS_MODEL = "lammps.model"
_HEADER = "dparallel-lammps-model 1"


def _f(x: float) -> str:
    """A double as the shortest text that reads back to it (``nan`` for NaN)."""
    x = float(x)
    return "nan" if math.isnan(x) else repr(x)


def _row(values: Any) -> str:
    return " ".join(_f(v) for v in values)


class _Unsupported(Exception):
    """The model uses something ``pair_style dparallel`` does not implement."""


def _element_block(descriptor: Any, model: HDNNP, e: str) -> list[str]:
    """The ``element`` block of ``e`` (features, scaling, network)."""
    elements = descriptor.elements
    feats = descriptor.features(e)
    lines = [f"element {e} {int(e in model.elements)}", f"features {len(feats)}"]
    for f in feats:
        nbs = [elements.index(n) for n in f["neighbors"]] + [-1]
        zeta = 0.0 if f["zeta"] is None else f["zeta"]
        lam = 0.0 if f["lambda"] is None else f["lambda"]
        lines.append(
            f"sf {f['type']} {nbs[0]} {nbs[1]} {_f(f['eta'])} {_f(f['rs'])} {_f(zeta)} "
            f"{_f(lam)} {_f(f['rc'])} {cutoff_type_id(f['cutoff'])} {_f(f['alpha'])}"
        )
    if e not in model.elements:
        return lines
    if model.n_features[e] != len(feats):
        raise _Unsupported(
            f"the network of {e} takes {model.n_features[e]} inputs, the descriptor has "
            f"{len(feats)}"
        )
    stats = (model.scaling or {}).get("statistics", {}).get(e)
    lo = stats["min"] if stats else [math.nan] * len(feats)
    hi = stats["max"] if stats else [math.nan] * len(feats)
    shift = getattr(model, f"shift_{e}").detach().double().tolist()
    factor = getattr(model, f"factor_{e}").detach().double().tolist()
    lines.append(f"scaling {_f(model.feature_offset)}")
    lines += [_row(row) for row in zip(shift, factor, lo, hi, strict=True)]
    linear = [m for m in model.nets[e].children() if isinstance(m, torch.nn.Linear)]
    acts = model.activations[e]
    k = model.elements.index(e)
    lines.append(
        f"network {_f(model.energy_scale.item())} {_f(model.ref_energy[k].item())} {len(linear)}"
    )
    for layer, act in zip(linear, acts, strict=True):
        w = layer.weight.detach().double()
        b = layer.bias.detach().double() if layer.bias is not None else torch.zeros(w.shape[0])
        lines.append(f"layer {w.shape[1]} {w.shape[0]} {act} {int(model.normalize_nodes)}")
        lines += [_row(r) for r in w.tolist()]
        lines.append(_row(b.tolist()))
    return lines


def lammps_model_text(descriptor: Any, model: HDNNP) -> str:
    """The text of ``lammps.model`` for (descriptor, model); see the module docstring.

    Raises ``_Unsupported`` (private) for a model the pair style cannot run.
    """
    from dparallel.descriptors import ACSF

    if not isinstance(descriptor, ACSF):
        raise _Unsupported(
            f"pair_style dparallel runs ACSF models only; this one uses {type(descriptor).__name__}"
            " descriptors (run it through dparallel.ase.Calculator instead)"
        )
    lines = [
        _HEADER,
        f"elements {len(descriptor.elements)} {' '.join(descriptor.elements)}",
        f"cutoff {_f(descriptor.r_cut)}",
    ]
    for e in descriptor.elements:
        lines += _element_block(descriptor, model, e)
    lines.append("end")
    return "\n".join(lines) + "\n"


def write_lammps_model(descriptor: Any, model: HDNNP, model_dir: Path) -> str | None:
    """Write ``model_dir/lammps.model``; returns None, or why the pair style cannot run it.

    An unsupported model still gets a ``lammps.model`` (``unsupported <reason>``), so that
    ``pair_coeff`` names the reason instead of a missing file.
    """
    try:
        text, reason = lammps_model_text(descriptor, model), None
    except _Unsupported as exc:
        reason = str(exc)
        text = f"{_HEADER}\nunsupported {reason}\n"
    write_file(model_dir / LAMMPS_MODEL, text, durable=True)
    return reason
