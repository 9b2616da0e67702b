"""Parse the symmetry-function part of an n2p2 ``input.nn`` file.

Recognised keywords: ``elements``/``number_of_elements``, ``cutoff_type <type> [alpha]``,
``symfunction_short <ec> 2 <e1> <eta> <rs> <rc>``,
``symfunction_short <ec> 3|9 <e1> <e2> <eta> <lambda> <zeta> <rc> [<rs>]``.
Everything after ``#`` is a comment; other keywords are ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dparallel.errors import InputFormatError, SourceNotFoundError

__all__ = ["parse_input_nn"]


def parse_input_nn(path: str | Path, unit: float = 1.0) -> tuple[list[str], dict[str, list]]:
    """Elements and per-central-element feature dicts (file order) of an n2p2 input.nn.

    ``unit`` converts file lengths to Å: rc, rs multiplied, η divided by unit².
    """
    p = Path(path)
    if not p.is_file():
        raise SourceNotFoundError(f"n2p2 input file not found: {p}")
    elements: list[str] | None = None
    cutoff: tuple[int, float] = (1, 0.0)
    raw: list[tuple[int, list[str]]] = []
    for lineno, line in enumerate(p.read_text().splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        key = words[0].lower()
        if key == "elements":
            elements = words[1:]
        elif key == "cutoff_type":
            try:
                cutoff = (int(words[1]), float(words[2]) if len(words) > 2 else 0.0)
            except (IndexError, ValueError):
                raise InputFormatError(
                    f"expected 'cutoff_type <0-8> [alpha]', got {line.strip()!r}",
                    path=p,
                    line=lineno,
                ) from None
            if not 0 <= cutoff[0] <= 8:
                raise InputFormatError(
                    f"cutoff_type {cutoff[0]} unknown (0-8)", path=p, line=lineno
                )
        elif key == "symfunction_short":
            raw.append((lineno, words[1:]))
    if elements is None:
        raise InputFormatError("no 'elements' line", path=p)
    feats: dict[str, list[dict[str, Any]]] = {e: [] for e in elements}
    for lineno, w in raw:
        feats_for = _parse_symfunction(w, elements, cutoff, unit, p, lineno)
        feats[w[0]].append(feats_for)
    return elements, feats


def _parse_symfunction(
    w: list[str],
    elements: list[str],
    cutoff: tuple[int, float],
    unit: float,
    path: Path,
    lineno: int,
) -> dict[str, Any]:
    """One ``symfunction_short`` line (words after the keyword) as a feature dict."""

    def fail(msg: str) -> InputFormatError:
        return InputFormatError(
            f"{msg}; got 'symfunction_short {' '.join(w)}'", path=path, line=lineno
        )

    if len(w) < 2:
        raise fail("expected 'symfunction_short <element> <type> ...'")
    center = w[0]
    try:
        type_ = int(w[1])
    except ValueError:
        raise fail("symmetry function type must be an integer") from None
    try:
        if type_ == 2:
            if len(w) != 6:
                raise fail("type 2 expects: <ec> 2 <e1> <eta> <rs> <rc>")
            nbs = [w[2]]
            eta, rs, rc = float(w[3]), float(w[4]), float(w[5])
            zeta = lam = None
        elif type_ in (3, 9):
            if len(w) not in (8, 9):
                raise fail(
                    f"type {type_} expects: <ec> {type_} <e1> <e2> <eta> <lambda> <zeta> <rc>"
                    " [<rs>]"
                )
            nbs = [w[2], w[3]]
            eta, lam, zeta, rc = float(w[4]), float(w[5]), float(w[6]), float(w[7])
            rs = float(w[8]) if len(w) == 9 else 0.0
        else:
            raise fail(f"symmetry function type {type_} is not supported (2, 3, 9)")
    except InputFormatError:
        raise
    except ValueError:
        raise fail("could not read a number") from None
    for e in [center, *nbs]:
        if e not in elements:
            raise fail(f"element {e!r} is not in the elements line {elements}")
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
