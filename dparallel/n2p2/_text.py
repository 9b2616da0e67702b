"""n2p2's numeric text files: text only, finite numbers, file and line named."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dparallel.errors import InputFormatError, SourceNotFoundError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["finite_number", "text_lines"]


def text_lines(path: Path, what: str) -> list[str]:
    """The lines of ``path``, an n2p2 ``what`` file: :class:`SourceNotFoundError` if there is
    none, :class:`InputFormatError` naming the line if it holds NUL bytes (binary) or bytes
    that are not UTF-8."""
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
    return text.splitlines()


def finite_number(word: str, path: Path, line: int) -> float:
    """``word`` as a float; raises :class:`InputFormatError` unless it is a finite number."""
    try:
        value = float(word)
    except ValueError:
        raise InputFormatError(f"not a number: {word!r}", path=path, line=line) from None
    if not math.isfinite(value):
        raise InputFormatError(f"not a finite number: {word!r}", path=path, line=line)
    return value
