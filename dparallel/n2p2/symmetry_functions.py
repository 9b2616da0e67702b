"""The symmetry-function part of an n2p2 ``input.nn``: elements, cutoff and symfunctions.

``number_of_elements``, ``elements``, ``cutoff_type <0-8> [alpha]`` (all required, as in
n2p2) and every ``symfunction_short`` (alias ``symfunction``) line of types 2, 3 and 9::

    symfunction_short <ec> 2 <e1> <eta> <rs> <rc>
    symfunction_short <ec> 3|9 <e1> <e2> <eta> <lambda> <zeta> <rc> [<rs>]

read as n2p2 reads them (docs/n2p2.md); errors name file and line.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dparallel.descriptors.acsf import ACSF, length_unit
from dparallel.descriptors.acsf_functions import refuse_far_cutoff
from dparallel.errors import DescriptorError
from dparallel.n2p2._text import c_number
from dparallel.n2p2.settings import log_unused, read_settings

if TYPE_CHECKING:
    from pathlib import Path

    from dparallel.errors import InputFormatError
    from dparallel.n2p2.settings import Entry, Settings

__all__ = [
    "SUPPORTED_TYPES",
    "acsf_from_input_nn",
    "acsf_of",
    "cutoff_of",
    "elements_of",
    "symmetry_functions",
]

log = logging.getLogger(__name__)

#: n2p2 symmetry-function types dparallel computes.
SUPPORTED_TYPES = (2, 3, 9)


def acsf_from_input_nn(path: str | Path, unit: float | str = 1.0, order: str = "n2p2") -> ACSF:
    """The symmetry functions of an n2p2 input.nn as an :class:`ACSF`, read as n2p2 reads them.

    ``unit``: the file's length unit in Å (a factor, or a unit-system name of
    :data:`dparallel.io.UNITS` such as ``"bohr-hartree"``; rc and rs × unit, η / unit²).
    Elements by atomic number; with ``order="n2p2"`` each element's functions in n2p2's
    sorted order."""
    settings = read_settings(path)
    log_unused(settings)  # never dropped silently; the network keywords: dparallel.n2p2
    return acsf_of(settings, unit, order)


def acsf_of(settings: Settings, unit: float | str = 1.0, order: str = "n2p2") -> ACSF:
    """The symmetry functions of read ``settings`` (see :func:`acsf_from_input_nn`)."""
    elements, feats = symmetry_functions(settings, length_unit(unit))
    return ACSF(elements, feats, order=order, lenient=True)


def elements_of(settings: Settings) -> list[str]:
    """``elements`` checked against ``number_of_elements``, ordered by atomic number."""
    from ase.data import atomic_numbers

    entry = settings.require("elements")
    symbols = entry.words
    for s in symbols:
        if s not in atomic_numbers or s == "X":
            raise settings.fail(entry, f"{s!r} is not a chemical symbol")
    if len(set(symbols)) != len(symbols):
        raise settings.fail(entry, "an element is listed twice")
    count = settings.require("number_of_elements")
    try:
        n = int(c_number(count.words[0], int))
    except (IndexError, ValueError):
        raise settings.fail(count, "expected 'number_of_elements <n>'") from None
    if n != len(symbols):
        raise settings.fail(
            count, f"says {n} elements but 'elements' (line {entry.line}) lists {len(symbols)}"
        )
    return sorted(symbols, key=lambda s: atomic_numbers[s])


def cutoff_of(settings: Settings) -> tuple[int, float]:
    """``cutoff_type <type> [alpha]`` → (type 0-8, α in [0, 1))."""
    entry = settings.require("cutoff_type")
    w = entry.words
    try:
        kind = int(c_number(w[0], int))
        alpha = float(c_number(w[1])) if len(w) > 1 else 0.0
    except (IndexError, ValueError):
        raise settings.fail(entry, "expected 'cutoff_type <0-8> [alpha]'") from None
    if not 0 <= kind <= 8:
        raise settings.fail(entry, f"cutoff_type {kind} unknown (0-8)")
    if not 0.0 <= alpha < 1.0:
        raise settings.fail(entry, f"cutoff alpha must be in [0, 1) as in n2p2, got {alpha}")
    if len(w) > 2:
        log.warning(
            "%s line %d: words after cutoff_type's alpha ignored", settings.path, entry.line
        )
    return kind, alpha


def symmetry_functions(
    settings: Settings, unit: float | None = 1.0
) -> tuple[list[str], dict[str, list[dict[str, Any]]]]:
    """Elements and feature dicts (file order per centre) from read settings; ``unit``: Å per
    file unit, or None where it is not known yet (lengths as written, their size unchecked)."""
    elements = elements_of(settings)
    cutoff = cutoff_of(settings)
    feats: dict[str, list[dict[str, Any]]] = {e: [] for e in elements}
    seen: dict[tuple, int] = {}  # one function → the line that gave it first
    for entry in settings.values("symfunction_short"):
        f = _parse_symfunction(entry, elements, cutoff, unit, settings)
        key = (f["center"], f["type"], *sorted(f["neighbors"]), f["eta"], f["rs"], f["zeta"])
        key = (*key, f["lambda"], f["rc"])
        if key in seen:
            raise settings.fail(
                entry,
                f"the same symmetry function as line {seen[key]} (type {f['type']} of "
                f"{f['center']}): it would be a duplicate feature column; remove one",
            )
        seen[key] = entry.line
        feats[f["center"]].append(f)
    return elements, feats


def _symfunction_type(entry: Entry, settings: Settings) -> int:
    """The type of a ``symfunction_short`` line, its word count checked (extra words warned)."""
    w = entry.words
    if len(w) < 2:
        raise settings.fail(entry, "expected '<element> <type> ...'")
    try:
        type_ = int(c_number(w[1], int))
    except ValueError:
        raise settings.fail(entry, "symmetry function type must be an integer") from None
    if type_ not in SUPPORTED_TYPES:
        raise settings.fail(entry, f"symmetry function type {type_} is not supported (2, 3, 9)")
    need, most = (6, 6) if type_ == 2 else (8, 9)
    if len(w) < need:
        usage = (
            "<e1> <eta> <rs> <rc>" if type_ == 2 else "<e1> <e2> <eta> <lambda> <zeta> <rc> [<rs>]"
        )
        raise settings.fail(entry, f"type {type_} expects: <ec> {type_} {usage}")
    if len(w) > most:
        log.warning(
            "%s line %d: %d extra words ignored (as n2p2 ignores them)",
            settings.path, entry.line, len(w) - most,
        )  # fmt: skip
    return type_


def _parse_symfunction(
    entry: Entry,
    elements: list[str],
    cutoff: tuple[int, float],
    unit: float | None,
    settings: Settings,
) -> dict[str, Any]:
    """One ``symfunction_short`` line as a feature dict (lengths converted by ``unit``, as
    written if None)."""
    w = entry.words

    def fail(msg: str) -> InputFormatError:
        return settings.fail(entry, msg)

    type_, center = _symfunction_type(entry, settings), w[0]
    try:
        if type_ == 2:
            nbs = [w[2]]
            eta, rs, rc = (float(c_number(x)) for x in w[3:6])
            zeta = lam = None
        else:
            nbs = [w[2], w[3]]
            eta, lam, zeta, rc = (float(c_number(x)) for x in w[4:8])
            rs = float(c_number(w[8])) if len(w) > 8 else 0.0
    except ValueError as exc:
        raise fail(f"could not read a number ({exc})") from None
    for e in [center, *nbs]:
        if e not in elements:
            raise fail(f"element {e!r} is not in the elements line {elements}")
    if rc <= 0:
        raise fail(f"cutoff radius must be positive, got {rc}")
    try:  # the one refusal of ACSF's own check an input.nn can reach: here with its line
        if unit is not None:
            hint = "an input.nn in bohr needs units: bohr-hartree"
            refuse_far_cutoff("cutoff rc", rc * unit, hint)
    except DescriptorError as exc:
        raise fail(str(exc)) from None
    unit = 1.0 if unit is None else unit
    where = (settings.path, entry.line)
    if zeta == 0 or lam == 0:  # angular parameters where n2p2's own results differ from ours
        log.warning(
            "%s line %d: zeta or lambda is 0: n2p2's own forces for this function are NaN "
            "(its symmetry-function groups divide by zeta·lambda); dparallel's are finite "
            "(an export to n2p2 refuses it)",
            *where,
        )
    if type_ != 2 and rs < 0:
        log.warning(
            "%s line %d: angular rs %g < 0: n2p2's symmetry-function groups compute it as "
            "rs = 0, dparallel uses %g (an export to n2p2 refuses it; docs/n2p2.md)",
            *where, rs, rs,
        )  # fmt: skip
    return {
        "type": type_,
        "center": center,
        "neighbors": nbs,
        "eta": eta / unit**2,
        "rs": rs * unit,
        "zeta": zeta,
        "lambda": lam,
        "rc": rc * unit,
        "cutoff": cutoff[0],
        "alpha": cutoff[1],
    }
