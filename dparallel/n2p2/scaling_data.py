"""n2p2 ``scaling.data``: per (element, symmetry function) min, max, mean and sigma.

Rows are ``e_index sf_index sf_min sf_max sf_mean sf_sigma`` (1-based indices), elements in
n2p2's order (atomic number) and, within an element, functions in n2p2's *sorted* order
(:meth:`dparallel.descriptors.ACSF.n2p2_order`). n2p2 (``Mode::setupSymmetryFunctionScaling``)
skips lines starting with ``#`` and takes the next ``n_sf`` rows for each element in turn;
sigma may be missing in old files (then 0). :func:`write_scaling_data` writes the file from
per-element statistics (anything with ``minimum``, ``maximum``, ``mean`` and ``sigma``
arrays, e.g. :class:`dparallel.store.stats.FeatureStats`).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from dparallel._files import write_file
from dparallel.errors import InputFormatError
from dparallel.n2p2._text import finite_number, text_lines

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping, Sequence

    from dparallel.descriptors.acsf import ACSF

__all__ = [
    "COLUMNS",
    "ScalingStatistics",
    "format_scaling_data",
    "looks_like_scaling_data",
    "read_scaling_data",
    "scaling_table",
    "write_scaling_data",
]

#: Statistics columns of one row, in file order.
COLUMNS = ("min", "max", "mean", "sigma")


class ScalingStatistics(Protocol):
    """Per-feature statistics of one element, each an (F,) array."""

    @property
    def minimum(self) -> np.ndarray: ...
    @property
    def maximum(self) -> np.ndarray: ...
    @property
    def mean(self) -> np.ndarray: ...
    @property
    def sigma(self) -> np.ndarray: ...


def scaling_table(stats: ScalingStatistics, order: Sequence[int] | None = None) -> np.ndarray:
    """The (F, 4) [min, max, mean, sigma] table of ``stats``, rows permuted by ``order``
    (e.g. :meth:`ACSF.n2p2_order`) when given."""
    table = np.stack([stats.minimum, stats.maximum, stats.mean, stats.sigma], 1)  # COLUMNS
    return table if order is None else table[list(order)]


def write_scaling_data(
    path: str | os.PathLike[str],
    statistics: Mapping[str, ScalingStatistics],
    acsf: ACSF | None = None,
) -> None:
    """Write ``scaling.data`` from element → statistics: elements ordered by atomic number,
    each element's rows in n2p2's sorted order when ``acsf`` (the functions the statistics
    are of, in their column order) is given, else in column order. An element of ``acsf``
    without statistics (no atoms in the data) gets the rows n2p2's ``nnp-scaling`` writes
    for it (min +DBL_MAX, max −DBL_MAX, mean and sigma NaN), so every element keeps its
    index."""
    from ase.data import atomic_numbers

    known = set(statistics) | set(acsf.elements if acsf is not None else ())
    elements = sorted(known, key=lambda symbol: atomic_numbers[symbol])
    tables = [
        scaling_table(statistics[e], None if acsf is None else acsf.n2p2_order(e))
        if e in statistics
        else np.tile(_NO_STATISTICS, (acsf.n_features(e) if acsf is not None else 0, 1))
        for e in elements
    ]
    write_file(path, format_scaling_data(tables), durable=True)


#: nnp-scaling's row of a function no atom gave a value: its statistics' initial values.
_NO_STATISTICS = np.array([np.finfo(np.float64).max, -np.finfo(np.float64).max, np.nan, np.nan])


def looks_like_scaling_data(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) reads as a ``scaling.data``: every whole
    line a comment, blank, or ``e_index sf_index min max mean sigma`` (n2p2's or ours)."""
    try:
        lines = head.decode("ascii").split("\n")[:-1] or [head.decode("ascii")]
    except UnicodeDecodeError:
        return False
    for line in lines:
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        try:
            int(fields[0]), int(fields[1]), *map(float, fields[2:])
        except (ValueError, IndexError):
            return False
        if len(fields) != 6:
            return False
    return True


def format_scaling_data(tables: Sequence[np.ndarray]) -> str:
    """Render ``scaling.data`` from one (F_e, 4) [min, max, mean, sigma] table per element.

    ``tables`` are ordered like n2p2's elements (atomic number), rows in n2p2's order.
    Numbers are written with 17 significant digits, so n2p2 reads back the same doubles.
    """
    lines = [
        "#" * 79,
        "# Symmetry function scaling data (written by dparallel).",
        "#" * 79,
        f"#{'e_index':>9}{'sf_index':>11}{'sf_min':>25}{'sf_max':>25}{'sf_mean':>25}{'sf_sigma':>25}",
        "#" * 121,
    ]
    for e_index, table in enumerate(tables, start=1):
        table = np.asarray(table, dtype=np.float64).reshape(-1, 4)
        for f, (lo, hi, mean, sigma) in enumerate(table.tolist(), start=1):
            lines.append(
                f"{e_index:>10d}{f:>11d}{lo:>25.16E}{hi:>25.16E}{mean:>25.16E}{sigma:>25.16E}"
            )
    return "\n".join(lines) + "\n"


def read_scaling_data(
    path: str | Path, n_features: Mapping[str, int], *, sigma: bool = False
) -> dict[str, np.ndarray]:
    """Element → (F_e, 4) [min, max, mean, sigma] rows of ``path``.

    ``n_features`` gives each element's number of functions, in n2p2's element order.
    Each row's element and function index must match its position (n2p2 only stops when
    both are wrong; a file that belongs to another input.nn is refused here). ``sigma``:
    the potential scales by sigma (``scale_symmetry_functions_sigma``), so every row must
    have one (n2p2 reads a missing one as 0 and divides by it).

    Raises
    ------
    InputFormatError
        Too few rows, a malformed row, a value that is not finite, an index that does not
        match, a binary or non-UTF-8 file; names the line.
    """
    p = Path(path)
    rows = [
        (lineno, line.split())
        for lineno, line in enumerate(text_lines(p, "scaling data"), start=1)
        if line.strip() and not line.startswith("#")
    ]
    need = sum(n_features.values())
    if len(rows) < need:
        raise InputFormatError(
            f"{len(rows)} scaling rows, but the symmetry functions need {need} "
            f"({', '.join(f'{e}: {n}' for e, n in n_features.items())})",
            path=p,
        )
    out: dict[str, np.ndarray] = {}
    rest = iter(rows)
    for e_index, (element, n) in enumerate(n_features.items(), start=1):
        table = np.zeros((n, 4))
        for f, (lineno, words) in enumerate(itertools.islice(rest, n)):
            try:
                idx = (int(words[0]), int(words[1]))
                values = [float(w) for w in words[2:6]]
                table[f, : len(values)] = values
                if len(words) < (6 if sigma else 5):
                    raise IndexError
            except (IndexError, ValueError):
                form = "sigma" if sigma else "[sigma]"
                why = " (input.nn's scale_symmetry_functions_sigma scales by it)" if sigma else ""
                raise InputFormatError(
                    f"expected 'e_index sf_index min max mean {form}'{why}", path=p, line=lineno
                ) from None
            _check_finite(words, p, lineno)
            if idx != (e_index, f + 1):
                raise InputFormatError(
                    f"row for element {idx[0]}, function {idx[1]} where element {e_index} "
                    f"({element}), function {f + 1} belongs: this scaling.data does not "
                    "match the input.nn",
                    path=p,
                    line=lineno,
                )
        out[element] = table
    return out


def _check_finite(words: list[str], path: Path, line: int) -> None:
    """Min, max and mean finite; sigma too, but where n2p2 writes NaN (a constant function)."""
    values = [finite_number(w, path, line) for w in words[2:5]]
    if len(words) > 5:
        constant = values[0] == values[1]
        if not (constant and words[5].lower().lstrip("+-") == "nan"):
            finite_number(words[5], path, line)
