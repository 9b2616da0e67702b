"""The indexers: one pass over a structure file's text per format, finding where each
structure's bytes start and end, its first line, atom count and cell (what
:mod:`dparallel.io._index` keeps and caches), and the structures broken beyond parsing.

extxyz and n2p2 ``input.data`` are read by dparallel's own streaming pass
(:data:`STREAMED`); any other format through ASE (:func:`index_ase`), which also copies a
format ASE reads only from its start for random access (:mod:`dparallel.io._frames`). A
change in what an indexer finds bumps :data:`dparallel.io._index.INDEX_VERSION` (cached
indexes are then built anew).
"""

from __future__ import annotations

import array
import itertools
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from dparallel.errors import InputFormatError
from dparallel.io._frames import first_copy

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dparallel.io.location import Location

__all__ = ["BOM", "STREAMED", "Found", "index_ase"]

log = logging.getLogger(__name__)

NAN = float("nan")
#: a structure's cell as an indexer reads it: its volume (NaN: none read), periodic directions
_Cell = tuple[float, int]

#: An atom count no file holds (islice would refuse one past sys.maxsize).
_MAX_ATOMS = 1 << 40

#: The UTF-8 byte-order mark some Windows editors put first: not part of the first line
#: (the index's first structure starts after it).
BOM = b"\xef\xbb\xbf"


def _first_line(raw: bytes, path: str) -> tuple[int, bytes]:
    """The bytes before a file's first line (its byte-order mark, if any) and the line
    without them; an :class:`InputFormatError` for a file whose lines end in CR only."""
    skip = len(BOM) if raw.startswith(BOM) else 0
    if b"\r" in raw.rstrip(b"\r\n"):
        name = Path(path).name
        raise InputFormatError(
            "its lines end in CR only (classic Mac OS text), so it reads as one line; "
            f"convert them first: tr '\\r' '\\n' < {name} > {name}.new",
            path=path,
            line=1,
        )
    return skip, raw[skip:]


def _int64s() -> array.array[int]:
    """A growing column of int64 (8 bytes an entry; a list of Python ints takes ~36)."""
    return array.array("q")


def _float64s() -> array.array[float]:
    """A growing column of float64 (8 bytes an entry)."""
    return array.array("d")


@dataclass
class Found:
    """What an indexer found so far: one entry per structure, and the broken ones."""

    starts: array.array[int] = field(default_factory=_int64s)
    ends: array.array[int] = field(default_factory=_int64s)
    counts: array.array[int] = field(default_factory=_int64s)
    lines: array.array[int] = field(default_factory=_int64s)
    volumes: array.array[float] = field(default_factory=_float64s)
    periodic: array.array[int] = field(default_factory=_int64s)
    errors: dict[int, tuple[int, str]] = field(default_factory=dict)

    def add(self, start: int, end: int, count: int, line: int, cell: _Cell = (NAN, -1)) -> None:
        self.starts.append(start)
        self.ends.append(end)
        self.counts.append(count)
        self.lines.append(line)
        self.volumes.append(cell[0])
        self.periodic.append(cell[1])


#: what an indexer returns: the structures found and the length of the (decompressed) text
_Built = tuple[Found, int]


def _is_count_line(raw: bytes, columns: int | None = None) -> bool:
    """Whether ``raw`` is a frame's count line: a non-negative integer first, as the
    indexer reads one (``3``, ``3 atoms``), and not an atom line: not of the frame's
    ``columns`` (its ``Properties``; an ``id:I:1`` column first is a number too), or
    without them, not a name and three numbers (``8 0.0 0.0 0.0``)."""
    words = raw.split()
    if not words or not words[0].isdigit():
        return False
    return len(words) != columns if columns is not None else not _atom_like(raw)


#: An extxyz comment line's ``Properties=name:type:count:…`` (quoted or not), as ASE reads it.
_PROPERTIES = re.compile(rb'(?:^|\s)Properties=("?)((?:[^:\s"]+:[SRILsril]:\d+:?)+)\1(?:\s|$)')


def _columns(comment: bytes) -> int | None:
    """The number of columns an atom line of the frame has, from its comment line's
    ``Properties`` (None where it has none)."""
    found = _PROPERTIES.search(comment)
    if found is None:
        return None
    fields = found.group(2).rstrip(b":").split(b":")
    return sum(int(count) for count in fields[2::3]) if len(fields) % 3 == 0 else None


def _quoted(comment: bytes, key: bytes) -> bytes | None:
    """The quoted value of ``key="…"`` in an extxyz comment line (None: not there)."""
    at = comment.find(key)
    while at > 0 and not comment[at - 1 : at].isspace():  # part of a longer key
        at = comment.find(key, at + 1)
    if at < 0:
        return None
    start = at + len(key)
    stop = comment.find(b'"', start)
    return comment[start:stop] if stop >= 0 else None


def _volume(words: list[bytes]) -> float:
    """|det| of a cell given as nine numbers (NaN where they are not nine numbers), in
    plain floats: a numpy call per structure cost more than the indexing pass."""
    try:
        a, b, c, d, e, f, g, h, i = map(float, words)
    except ValueError:  # not nine words, or not numbers
        return NAN
    return abs(a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g))


def _extxyz_cell(comment: bytes) -> _Cell:
    """The cell of an extxyz comment line, as ASE reads it: a ``Lattice`` without ``pbc``
    is periodic in all three; no ``Lattice``: 0 periodic directions. Its numbers are read
    only where it is periodic in all three (the planner uses no other volume)."""
    lattice = _quoted(comment, b'Lattice="')
    if lattice is None:
        return NAN, 0
    pbc = _quoted(comment, b'pbc="')
    periodic = 3 if pbc is None else sum(f in _TRUE for f in pbc.upper().split())
    return (_volume(lattice.split()) if periodic == 3 else NAN), periodic


_TRUE = {b"T", b"TRUE", b"1"}


def _atom_like(raw: bytes) -> bool:
    """Whether ``raw`` looks like an atom line (a name, then at least three numbers); a
    comment line's ``Lattice="6 0 0 …`` is not one."""
    words = raw.split()
    if len(words) < 4 or b"=" in words[0] or b'"' in words[0]:
        return False
    try:
        [float(w) for w in words[1:4]]
    except ValueError:
        return False
    return True


class _Lines:
    """A file's lines, read front to back, with lines given back to be read again (a
    compressed stream cannot seek back). ``it`` yields them: the file itself until
    something is given back."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._back: Iterator[bytes] = iter(())
        self.it: Iterator[bytes] = f

    def unread(self, lines: list[bytes]) -> None:
        """Read ``lines`` next, before what was given back earlier and not read yet."""
        self._back = iter([*lines, *self._back])
        self.it = itertools.chain(self._back, self._f)


def _index_extxyz(f: BinaryIO, path: str) -> _Built:
    """One pass over an (ext)xyz file: header line = atom count, then comment + atom lines.

    A count that disagrees with the atom lines is blamed on its own frame: a count too
    small leaves atom lines where the next count should be (they are added to the frame,
    which is marked broken); a count too large swallows the next frame's count line (the
    frame is cut there, marked broken, and indexing goes on from that line).
    """
    found = Found()
    errors = found.errors
    pos, line = 0, 1
    lines = _Lines(f)
    while True:
        head = next(lines.it, b"")
        if not head:
            break
        if pos == 0:
            pos, head = _first_line(head, path)
        if not head.strip():
            pos += len(head)
            line += 1
            continue
        frame = len(found.counts)
        try:
            n = int(head.split()[0])
            if n < 0:
                raise ValueError
        except ValueError:
            if frame and _atom_like(head):
                pos, line = _extra_atom_lines(lines, head, pos, line, found)
                continue
            raise InputFormatError(
                f"expected the number of atoms of a new frame, found {head[:60]!r}",
                path=path,
                line=line,
                frame=frame,
            ) from None
        if n >= _MAX_ATOMS:
            raise InputFormatError(
                f"atom count {n} is beyond any structure (at most {_MAX_ATOMS - 1})",
                path=path,
                line=line,
                frame=frame,
            )
        body = list(itertools.islice(lines.it, n + 1))
        columns = _columns(body[0]) if body else None
        cut = next((k for k in range(1, len(body)) if _is_count_line(body[k], columns)), None)
        if cut is not None:  # an atom line is never a lone integer: the next count line
            errors[frame] = (
                line,
                f"atom count {n} on line {line} is too large: line {line + 1 + cut} "
                f"starts the next frame after {cut - 1} atom lines",
            )
            lines.unread(body[cut:])
            body = body[:cut]
        nbytes = len(head) + sum(map(len, body))
        if len(body) < n + 1 and frame not in errors:
            got = max(len(body) - 1, 0)
            errors[frame] = (
                line,
                f"truncated frame: expected {n} atom lines, file ends after {got}",
            )
        found.add(pos, pos + nbytes, n, line, _extxyz_cell(body[0]) if body else (NAN, 0))
        pos += nbytes
        line += 1 + len(body)
    return found, pos


def _extra_atom_lines(
    lines: _Lines, head: bytes, pos: int, line: int, found: Found
) -> tuple[int, int]:
    """Atom lines after a frame whose count was too small: give them to that frame, broken."""
    frame = len(found.counts) - 1
    first = found.lines[frame]
    found.errors[frame] = (
        first,
        f"atom count {found.counts[frame]} on line {first} is too small: line {line} holds "
        f"another atom line ({head.strip()[:60].decode(errors='replace')!r})",
    )
    nbytes, nlines = len(head), 1
    while True:
        raw = next(lines.it, b"")
        if not raw or not _atom_like(raw):
            lines.unread([raw] if raw else [])
            break
        nbytes += len(raw)
        nlines += 1
    found.ends[frame] += nbytes
    return pos + nbytes, line + nlines


def _index_n2p2(f: BinaryIO, path: str) -> _Built:
    """One pass over an n2p2 ``input.data``: structures are ``begin`` … ``end`` blocks."""
    found = Found()
    pos = 0
    open_at: tuple[int, int] | None = None  # (byte, line) of the open ``begin``
    n_atoms = 0
    lattice: list[bytes] = []  # the open block's lattice vectors' numbers
    for line, raw in enumerate(f, start=1):
        if pos == 0:
            pos, raw = _first_line(raw, path)
        key = raw.split(None, 1)[0] if raw.strip() else b""
        if key == b"begin":
            if open_at is not None:
                why = f"'begin' without 'end' (next 'begin' at line {line})"
                found.errors[len(found.counts)] = (open_at[1], why)
                found.add(open_at[0], pos, n_atoms, open_at[1], _n2p2_cell(lattice))
            open_at, n_atoms, lattice = (pos, line), 0, []
        elif key == b"end":
            if open_at is None:
                raise InputFormatError("'end' without 'begin'", path=path, line=line)
            found.add(open_at[0], pos + len(raw), n_atoms, open_at[1], _n2p2_cell(lattice))
            open_at = None
        elif key and open_at is None:
            hint = (
                ""
                if found.counts
                else " (read as n2p2 input.data, as every *.data file is; another format "
                "needs --format, e.g. lammps-data)"
            )
            raise InputFormatError(
                f"{key.decode(errors='replace')!r} outside a 'begin' … 'end' block{hint}",
                path=path,
                line=line,
            )
        elif key == b"atom":
            n_atoms += 1
        elif key == b"lattice":
            lattice.extend(raw.split()[1:4])
        pos += len(raw)
    if open_at is not None:
        found.errors[len(found.counts)] = (open_at[1], "'begin' without 'end' (file ends first)")
        found.add(open_at[0], pos, n_atoms, open_at[1], _n2p2_cell(lattice))
    return found, pos


def _n2p2_cell(lattice: list[bytes]) -> _Cell:
    """The cell of an n2p2 block's ``lattice`` lines' numbers: three lines, periodic in all
    three; none: 0 periodic directions."""
    return (_volume(lattice), 3) if len(lattice) == 9 else (NAN, 0)


#: The formats indexed by dparallel's own streaming pass (all others: through ASE).
STREAMED = {"extxyz": _index_extxyz, "n2p2": _index_n2p2}


def index_ase(
    location: Location, format: str, candidates: list[Path]
) -> tuple[Found, int, Path | None]:
    """Other ASE formats: read every structure once (``ase.io.iread``, one at a time),
    keep its atom count and cell (as :func:`_extxyz_cell` does: the volume where periodic
    in all three directions); a format ASE reads only from its start is also copied for
    random access (:func:`~dparallel.io._frames.first_copy`)."""
    import ase.io

    path = location.require_local(f"reading {format!r} files (through ASE)")

    found = Found()
    copy = first_copy(candidates)
    try:
        for atoms in ase.io.iread(str(path), index=":", format=format):
            if not found.counts and format.startswith("lammps-dump"):
                _warn_types(atoms, path)
            copy.add(atoms)
            periodic = int(np.count_nonzero(atoms.pbc))
            volume = float(atoms.cell.volume) if periodic == 3 else NAN  # ASE's |det|
            found.counts.append(len(atoms))  # no byte ranges, no lines
            found.lines.append(0)
            found.volumes.append(volume)
            found.periodic.append(periodic)
    except Exception as exc:
        copy.drop()
        raise InputFormatError(
            f"ASE cannot read it as {format!r}: {exc}", path=path, frame=len(found.counts)
        ) from exc
    except BaseException:  # interrupted: no half copy
        copy.drop()
        raise
    if not found.counts:  # an empty file: refused by the caller
        copy.drop()
    return found, int(location.info()["size"]), copy.done()


def _warn_types(atoms: Any, path: Path) -> None:
    """Warn where a LAMMPS dump's elements are its atom types (no ``element`` column):
    ASE reads type 1 as H, 2 as He, ..."""
    types = atoms.arrays.get("type")
    if types is not None and np.array_equal(atoms.numbers, types):
        log.warning(
            "%s: no element column, so ASE reads atom type 1 as H, 2 as He, ... (atomic "
            "numbers); unless that is so, write the dump with an element column "
            "(dump_modify ID element Cu Ni ...)",
            path,
        )
