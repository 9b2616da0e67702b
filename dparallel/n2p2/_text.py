"""Reading n2p2's numeric text files: text only, finite numbers, file and line named."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dparallel.errors import InputFormatError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["finite_number", "text_lines"]


def text_lines(path: Path, what: str) -> list[str]:
    """The lines of ``path``, an n2p2 ``what`` file; a binary or non-UTF-8 file is named so.

    Raises
    ------
    InputFormatError
        The file holds NUL bytes (binary) or bytes that are not UTF-8; names the line.
    """
    data = path.read_bytes()
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputFormatError(
            f"a binary file, not an n2p2 {what} (text) file", path=path, line=_line_of(data, nul)
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFormatError(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x}): an n2p2 {what} file is plain text",
            path=path,
            line=_line_of(data, exc.start),
        ) from None
    return text.splitlines()


def _line_of(data: bytes, offset: int) -> int:
    """The 1-based line holding byte ``offset``."""
    return data.count(b"\n", 0, offset) + 1


def finite_number(word: str, path: Path, line: int) -> float:
    """``word`` as a float; raises :class:`InputFormatError` unless it is a finite number."""
    try:
        value = float(word)
    except ValueError:
        raise InputFormatError(f"not a number: {word!r}", path=path, line=line) from None
    if not math.isfinite(value):
        raise InputFormatError(f"not a finite number: {word!r}", path=path, line=line)
    return value
