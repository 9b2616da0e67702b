"""n2p2's numeric text files: text only, finite numbers, file and line named."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from dparallel.errors import InputFormatError, SourceNotFoundError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["c_number", "finite_number", "text_lines"]

#: A whole word that C's atof/atoi (n2p2's readers) read to its end: ASCII decimal only.
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_INT = re.compile(r"[+-]?\d+", re.ASCII)


def text_lines(path: Path, what: str) -> list[str]:
    """The lines of ``path``, an n2p2 ``what`` file, as n2p2's ``getline`` gives them (split
    at ``\\n`` only: a Windows line end leaves its ``\\r``): :class:`SourceNotFoundError` if
    there is none, :class:`InputFormatError` for a folder, or naming the line if it holds NUL
    bytes (binary) or bytes that are not UTF-8."""
    if path.is_dir():
        raise InputFormatError(f"a folder, not an n2p2 {what} file", path=path)
    if not path.is_file():
        raise SourceNotFoundError(f"n2p2 {what} file not found: {path}")
    data = path.read_bytes()
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputFormatError(
            f"a binary file, not an n2p2 {what} (text) file",
            path=path,
            line=data.count(b"\n", 0, nul) + 1,
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFormatError(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x}): an n2p2 {what} file is plain text",
            path=path,
            line=data.count(b"\n", 0, exc.start) + 1,
        ) from None
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def c_number(word: str, kind: type[float] | type[int] = float) -> float | int:
    """``word`` as a finite ``kind``, read as n2p2 reads it; ``ValueError`` (saying why) for
    a word n2p2 reads otherwise: not finite (nan, inf, 1e999), or one Python's ``float``/``int``
    would read but C's atof/atoi would stop in or not read (``1_0``: 10 in Python, 1 in C;
    non-ASCII digits; a fraction for an integer)."""
    if not (_INT if kind is int else _FLOAT).fullmatch(word):
        try:
            infinite = not math.isfinite(float(word))
        except ValueError:
            infinite = False
        raise ValueError(f"not {'a finite' if infinite else 'a'} number: {word!r}")
    value = kind(word)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {word!r}")
    return value


def finite_number(word: str, path: Path, line: int) -> float:
    """``word`` as a float (:func:`c_number`); raises :class:`InputFormatError` naming the
    line unless it is a finite number."""
    try:
        return float(c_number(word))
    except ValueError as exc:
        raise InputFormatError(str(exc), path=path, line=line) from None
