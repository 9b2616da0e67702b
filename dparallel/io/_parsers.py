"""Parse a byte range of a structure file into a :class:`StructureBatch`.

Each parser returns ``(batch, kept, errors)``: ``batch`` holds the structures that parsed
(not yet validated), ``kept`` (k,) their file indices, and ``errors`` maps a file index to
``(line, reason)`` for the ones that did not.
"""

from __future__ import annotations

import io
import logging
import re
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from dparallel.io._comment import comment_info
from dparallel.io._labels import is_real, report_unread, unread_label
from dparallel.io._text import read_range
from dparallel.types import LabelKeys, StructureBatch

if TYPE_CHECKING:
    from collections.abc import Collection

    from dparallel.io._index import FileIndex
    from dparallel.io.location import Location

__all__ = ["parse_range", "report_labels"]

_Errors = dict[int, tuple[int, str]]  # file index → (line, reason)
_Parsed = tuple[StructureBatch, np.ndarray, _Errors]

log = logging.getLogger(__name__)


def _decode(raw: bytes, path: Location, first_line: int) -> str:
    """UTF-8 text of one structure; bytes that are not UTF-8 (e.g. a Latin-1 comment) are
    replaced, with a warning naming the file and the line."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + raw.count(b"\n", 0, exc.start)
        log.warning(
            "%s, line %d: not UTF-8 text (byte 0x%02x); read with replacement characters",
            path,
            line,
            raw[exc.start],
        )
        return raw.decode("utf-8", errors="replace")


def parse_range(
    path: Location, index: FileIndex, start: int, stop: int, keys: LabelKeys
) -> _Parsed:
    """Parse structures ``[start, stop)`` of ``path`` using its ``index``, their labels
    under ``keys`` (n2p2: its fixed ones; a structure without a key given is an error)."""
    if stop <= start:
        return StructureBatch.empty(), np.zeros(0, np.int64), {}
    if index.format not in ("n2p2", "extxyz"):
        return _parse_ase(path, index, start, stop, keys)
    errors = {i: index.errors[i] for i in range(start, stop) if i in index.errors}
    base = int(index.starts[start])
    raw = read_range(path, base, int(index.ends[stop - 1]))  # one read (one request remotely)
    texts = {
        i: _decode(raw[index.starts[i] - base : index.ends[i] - base], path, int(index.lines[i]))
        for i in range(start, stop)
        if i not in errors
    }
    if index.format == "n2p2":
        return _parse_n2p2(texts, index, errors)
    return _parse_extxyz(texts, index, errors, path, keys)


def report_labels(path: Location, index: FileIndex, i: int, keys: LabelKeys) -> None:
    """Log what :func:`unread_label` says of extxyz frame ``i``'s labels, from its comment
    line alone (at most the first 64 KiB of the frame are read)."""
    start = int(index.starts[i])
    raw = read_range(path, start, min(int(index.ends[i]), start + (1 << 16)))
    rows = raw.decode("utf-8", errors="replace").split("\n")
    if len(rows) < 3:
        return  # no whole comment line: the read says what is wrong
    try:
        info = comment_info(rows[1])
        columns = _props(str(info.get("Properties", "species:S:1:pos:R:3")))[1]
    except Exception:  # noqa: BLE001 - an odd comment line: its read names the line
        return
    note = unread_label(info, columns, keys)
    if note is not None:
        report_unread(path, int(index.lines[i]) + 1, i, *note)


_PROPS = re.compile(r"Properties=([^\s\"]+|\"[^\"]*\")", re.IGNORECASE)


def _diagnose_extxyz(text: str, line0: int) -> tuple[int, str] | None:
    """Find the first bad line of one extxyz frame; ``None`` when nothing obvious is wrong."""
    from ase.data import atomic_numbers

    rows = text.splitlines()
    if len(rows) < 2:
        return None
    m = _PROPS.search(rows[1])
    spec = m.group(1).strip('"') if m else "species:S:1:pos:R:3"
    try:
        n_cols, props = _props(spec)
    except (_Fallback, ValueError):
        return None
    columns = [(name, kind) for name, (kind, _, width) in props.items() for _ in range(width)]
    for k, row in enumerate(rows[2:]):
        line = line0 + 2 + k
        cols = row.split()
        if len(cols) != n_cols:
            return (
                line,
                f"wrong column count: expected {n_cols} columns ({spec}), found {len(cols)}",
            )
        for c, ((name, kind), value) in enumerate(zip(columns, cols, strict=True)):
            if kind in _NUMBER_KINDS:
                try:
                    _NUMBER_KINDS[kind][1](value)
                except ValueError:
                    what = _NUMBER_KINDS[kind][0]
                    where = f"in column {c + 1} ({name})"
                    return line, f"{what} field {value!r} {where}{_fortran_hint(value)}"
            elif name == "species" and value.capitalize() not in atomic_numbers:
                return line, f"unknown element {value!r}"
        if "species" in props and "Z" in props:
            symbol, z = cols[props["species"][1]], int(cols[props["Z"][1]])
            if atomic_numbers[symbol.capitalize()] != z:
                return line, f"species {symbol!r} and Z {z} name different elements"
    return None


_NUMBER_KINDS = {"R": ("non-numeric", float), "I": ("non-integer", int)}


def _atomic_number(symbol: str, z_of: dict[str, int]) -> int:
    """An extxyz species' atomic number, in any case (``NA``, ``o``), as ASE reads it."""
    return z_of[symbol] if symbol in z_of else z_of[symbol.capitalize()]


class _Fallback(Exception):
    """The fast path does not handle this frame; let ASE (and the diagnosis) do it."""


class _Absent(Exception):
    """The frame lacks a label key given (the message says which, and the keys it has)."""


#: How an extxyz frame calls the places of its labels' keys (:meth:`LabelKeys.absent`).
_EXTXYZ_KEYS = ("comment-line keys", "Properties columns")


def _props(spec: str) -> tuple[int, dict[str, tuple[str, int, int]]]:
    """Total columns and ``{name: (kind, first column, width)}`` of a Properties string."""
    parts = spec.split(":")
    if len(parts) % 3:
        raise _Fallback
    cols: dict[str, tuple[str, int, int]] = {}
    col = 0
    for name, kind, width in zip(parts[0::3], parts[1::3], parts[2::3], strict=True):
        cols[name] = (kind.upper(), col, int(width))
        col += int(width)
    return col, cols


def _fast_frame(rows: list[str], n: int, z_of: dict[str, int], keys: LabelKeys) -> tuple:
    """Parse one frame's comment + atom rows as ASE would, vectorised over atoms, labels
    under ``keys``; the fields of a batch, then what :func:`unread_label` says of its
    labels. :class:`_Absent` when it lacks a key given."""
    info = comment_info(rows[0])
    if _miscased(info) is not None:
        raise _Fallback  # refused in _ase_frame, naming the line
    ncols, cols = _props(str(info.get("Properties", "species:S:1:pos:R:3")))
    absent = keys.absent(info, cols, _EXTXYZ_KEYS)
    if absent is not None:
        raise _Absent(absent)
    if "species" not in cols or cols.get("pos", ("", 0, 0))[::2] != ("R", 3):
        raise _Fallback
    tokens = np.asarray(" ".join(rows[1 : n + 1]).split())
    if tokens.shape[0] != n * ncols:
        raise _Fallback
    table = tokens.reshape(n, ncols)  # (n, ncols) str

    def real(name: str) -> np.ndarray | None:
        if name not in cols:
            return None
        if cols[name][::2] != ("R", 3):
            raise _Fallback  # e.g. forces:I:3, which ASE reads as forces
        _, c, w = cols[name]
        try:
            return table[:, c : c + w].astype(np.float64)  # (n, 3)
        except ValueError:
            raise _Fallback from None

    species = table[:, cols["species"][1]]
    try:
        if n <= 64:  # a small frame: one lookup per atom beats sorting
            numbers = np.array([_atomic_number(u, z_of) for u in species.tolist()], np.int64)
        else:
            uniq, inverse = np.unique(species, return_inverse=True)
            numbers = np.array([_atomic_number(str(u), z_of) for u in uniq], np.int64)
            numbers = numbers[inverse.reshape(-1)]
    except KeyError:
        raise _Fallback from None
    if "Z" in cols and not np.array_equal(table[:, cols["Z"][1]].astype(np.int64), numbers):
        raise _Fallback  # the diagnosis names the line where species and Z disagree
    positions = real("pos")
    found = (real(name) for name in keys.force_keys())
    forces = next((f for f in found if f is not None), np.full((n, 3), np.nan))
    periodic = "Lattice" in info
    pbc = info.get("pbc", [periodic] * 3)
    # ASE's cell is the transposed Lattice
    cell = np.asarray(info["Lattice"], np.float64).T if periodic else np.zeros((3, 3))
    energy = next((info[key] for key in keys.energy_keys() if key in info), np.nan)
    if not is_real(energy):
        raise _Fallback  # ASE's reading then names the line (_ase_frame)
    energy = float(energy)
    tag = str(info.get("set", info.get("tag", "")))
    pbc = np.asarray(pbc, bool).reshape(3)
    return numbers, positions, forces, cell, pbc, energy, tag, unread_label(info, cols, keys)


def _parse_extxyz(
    texts: dict[int, str], index: FileIndex, errors: _Errors, path: Location, keys: LabelKeys
) -> _Parsed:
    """Fast vectorised path per frame; ASE (plus a diagnosis) for frames it cannot take.
    Labels under keys that are not read are logged once per file (io/_labels.py)."""
    from ase.data import atomic_numbers

    fields: list[tuple] = []
    kept: list[int] = []
    for i, text in texts.items():
        n, line = int(index.counts[i]), int(index.lines[i])
        try:
            fields.append(_fast_frame(text.split("\n")[1 : n + 2], n, atomic_numbers, keys))
        except _Absent as exc:  # its comment line names (or lacks) the key
            errors[i] = (line + 1, str(exc))
            continue
        except Exception:  # noqa: BLE001 - _Fallback or any odd comment line: ASE decides
            # the diagnosis first: stricter than ASE, which ignores extra columns
            problem = _diagnose_extxyz(text, line) or _ase_frame(text, line, fields, keys)
            if problem is not None:
                errors[i] = problem
                continue
        kept.append(i)
    if not kept:
        return StructureBatch.empty(), np.zeros(0, np.int64), errors
    numbers, positions, forces, cells, pbc, energy, tags, notes = zip(*fields, strict=True)
    for i, note in zip(kept, notes, strict=True):
        if note is not None:
            report_unread(path, int(index.lines[i]) + 1, i, *note)
    batch = StructureBatch(
        numbers=np.concatenate(numbers),
        positions=np.concatenate(positions),
        forces=np.concatenate(forces),
        cells=np.stack(cells),
        pbc=np.stack(pbc),
        energy=np.asarray(energy, np.float64),
        offsets=np.concatenate([[0], np.cumsum([len(z) for z in numbers])]),
        tags=np.asarray(tags, dtype=object),
    )
    return batch, np.asarray(kept, np.int64), errors


#: Comment-line keys ASE reads in this case only (GPUMD in any case): another case is
#: refused, as ASE would read no cell (a molecule) or the default columns (no forces).
_CASED = {"lattice": "Lattice", "properties": "Properties"}


def _miscased(info: dict[str, Any]) -> str | None:
    """The first key of ``info`` that is ``Lattice`` or ``Properties`` in another case."""
    return next((k for k in info if _CASED.get(k.lower(), k) != k), None)


def _ase_frame(
    text: str, line: int, fields: list[tuple], keys: LabelKeys
) -> tuple[int, str] | None:
    """One frame read by ASE (labels under ``keys``), appended to ``fields``; ``(line,
    reason)`` where ASE cannot, or where it lacks a key given."""
    import ase.io

    try:
        frames = ase.io.read(io.StringIO(text), index=":", format="extxyz")
        if len(frames) != 1:
            raise ValueError(f"expected one frame, ASE found {len(frames)}")
    except Exception as exc:  # noqa: BLE001 - reported with file, line and reason
        return line + 1, f"cannot parse frame: {exc}"  # its atom lines passed the diagnosis
    from ase.io.extxyz import key_val_str_to_dict

    comment = text.split("\n")[1].strip() if text.count("\n") else ""
    info = key_val_str_to_dict(comment) if comment else {}
    key = _miscased(info)
    if key is not None:
        right = _CASED[key.lower()]
        return line + 1, (
            f"{key}= is not read: ASE and dparallel read {right}= only, in this case; rename "
            f"it to {right}= in the file (GPUMD takes any case)"
        )
    for key in keys.energy_keys():  # ASE would keep a string, a list or a bool (energy=T)
        if key in info and not is_real(info[key]):
            hint = _fortran_hint(info[key]) if isinstance(info[key], str) else ""
            return line + 1, f"{key}={info[key]!r} is not a number{hint}"
    absent = keys.absent_from_ase(cast("ase.Atoms", frames[0]))
    if absent is not None:
        return line + 1, absent
    try:
        b = StructureBatch.from_ase(frames, energy_key=keys.energy, forces_key=keys.forces)
    except (ValueError, TypeError) as exc:  # e.g. a REF_forces column of text
        return line + 1, f"cannot read its energy or forces as numbers: {exc}"
    try:
        columns: Collection[str] = _props(str(info.get("Properties", "")))[1]
    except (_Fallback, ValueError):  # ASE read it nonetheless: no label column to name
        columns = ()
    note = unread_label(info, columns, keys)
    energy, tag = b.energy[0], b.tags[0]
    fields.append((b.numbers, b.positions, b.forces, b.cells[0], b.pbc[0], energy, tag, note))
    return None


def _parse_n2p2(texts: dict[int, str], index: FileIndex, errors: _Errors) -> _Parsed:
    from ase.data import atomic_numbers

    structures: list[_N2p2Structure] = []
    for i, text in texts.items():
        try:
            structures.append(_n2p2_structure(i, int(index.lines[i]), text))
        except _LineError as exc:
            errors[i] = (exc.line, str(exc))
    atoms = _n2p2_atoms(structures, atomic_numbers)
    if atoms is None:  # a bad atom line somewhere: find it structure by structure
        bad = {st.number: st for st in structures if _n2p2_atoms([st], atomic_numbers) is None}
        errors.update({i: _bad_atom_line(st, atomic_numbers) for i, st in bad.items()})
        structures = [st for st in structures if st.number not in bad]
        atoms = _n2p2_atoms(structures, atomic_numbers)
    if not structures or atoms is None:
        return StructureBatch.empty(), np.zeros(0, np.int64), errors
    numbers, data = atoms  # (N,), (N, 6): x y z fx fy fz
    counts = [len(st.atom_rows) for st in structures]
    batch = StructureBatch(
        numbers=numbers,
        positions=data[:, :3],
        cells=np.asarray([st.lattice or np.zeros((3, 3)) for st in structures], np.float64),
        pbc=np.asarray([[bool(st.lattice)] * 3 for st in structures], bool),
        energy=np.asarray([st.energy for st in structures]),
        forces=data[:, 3:],
        offsets=np.concatenate([[0], np.cumsum(counts)]),
        tags=np.asarray([st.tag for st in structures], dtype=object),
    )
    return batch, np.asarray([st.number for st in structures], np.int64), errors


class _N2p2Structure(NamedTuple):
    """One n2p2 structure with its atom lines still as text."""

    number: int  # index in the file
    line: int  # of its ``begin`` (1-based)
    atom_rows: list[tuple[int, str]]  # (line, text) of each atom line
    lattice: list[list[float]]  # 0 or 3 rows
    energy: float
    tag: str


def _n2p2_structure(i: int, first_line: int, block: str) -> _N2p2Structure:
    """Keywords of one structure's text; atom lines are kept for :func:`_n2p2_atoms`."""
    atom_rows: list[tuple[int, str]] = []
    lattice: list[list[float]] = []
    energy = float("nan")
    tag = ""
    line = first_line
    try:
        for k, raw in enumerate(block.splitlines()):
            line = first_line + k
            cols = raw.split(None, 1)
            key = cols[0] if cols else ""
            if key == "atom":
                atom_rows.append((line, raw))
            elif key == "begin":  # n2p2 (Structure.cpp) reads set=train|test here only
                for word in raw.split()[1:]:
                    if word not in ("set=train", "set=test"):
                        raise ValueError(
                            f"unknown 'begin' argument {word!r}: n2p2 accepts only set=train "
                            "or set=test there (and refuses the file otherwise)"
                        )
                    tag = word[4:]
            elif key in ("", "end", "charge", "comment"):  # a comment is free text in n2p2
                continue
            elif key == "lattice":
                cols = raw.split()
                _ncols(cols, 4, "lattice x y z")
                lattice.append([_num(c) for c in cols[1:4]])
            elif key == "energy":
                cols = raw.split()
                _ncols(cols, 2, "energy E")
                energy = _num(cols[1])
            else:
                raise ValueError(f"unknown keyword {key!r}")
    except ValueError as exc:
        raise _LineError(line, str(exc)) from None
    if len(lattice) not in (0, 3):  # structure-level checks point at its 'begin'
        raise _LineError(first_line, f"expected 0 or 3 'lattice' lines, found {len(lattice)}")
    return _N2p2Structure(i, first_line, atom_rows, lattice, energy, tag)


def _n2p2_atoms(
    structures: list[_N2p2Structure], z_of: dict[str, int]
) -> tuple[np.ndarray, np.ndarray] | None:
    """Numbers (N,) and x y z fx fy fz (N, 6) of every atom line of ``structures``, by one
    call of numpy's C text parser (~3x faster than splitting lines in Python); ``None`` if
    any line is not ``atom x y z element charge n fx fy fz`` with a known element."""
    lines = [raw for st in structures for _, raw in st.atom_rows]
    if not lines:
        return np.zeros(0, np.int64), np.zeros((0, 6))

    def element(text: str) -> float:
        return float(z_of[text])  # KeyError: not an element

    try:
        table = np.loadtxt(
            io.StringIO("\n".join(lines)),
            dtype=np.float64,
            comments=None,
            converters={0: lambda text: 0.0 if text == "atom" else float("nan"), 4: element},
            ndmin=2,
        )  # (N, 10), the column count checked on every line
    except (ValueError, KeyError):
        return None
    if table.shape != (len(lines), 10) or np.isnan(table[:, 0]).any():
        return None
    return table[:, 4].astype(np.int64), table[:, _NUMERIC[_KEEP]]


class _LineError(ValueError):
    """A parse error at a known line."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


_NUMERIC = np.array([1, 2, 3, 5, 6, 7, 8, 9])  # every number of "atom x y z el q n fx fy fz"
_KEEP = np.array([0, 1, 2, 5, 6, 7])  # x y z fx fy fz among _NUMERIC


def _bad_atom_line(st: _N2p2Structure, z_of: dict[str, int]) -> tuple[int, str]:
    """``(line, reason)`` of the first atom line of ``st`` that does not parse."""
    for line, raw in st.atom_rows:
        cols = raw.split()
        try:
            _ncols(cols, 10, "atom x y z element charge n fx fy fz")
            if cols[4] not in z_of:
                raise ValueError(f"unknown element {cols[4]!r}")
            for c in _NUMERIC:
                _num(cols[c])
        except ValueError as exc:
            return line, str(exc)
    return st.line, "cannot parse the atom lines"  # pragma: no cover - a line is found


def _ncols(cols: list[str], n: int, what: str) -> None:
    if len(cols) != n:
        raise ValueError(f"wrong column count: expected {n} ({what}), found {len(cols)}")


def _num(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"non-numeric field {text!r}{_fortran_hint(text)}") from None


#: a number with a Fortran double-precision exponent (``1.0D-03``), which Python refuses
_FORTRAN = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)[dD][+-]?\d+")


def _fortran_hint(text: str) -> str:
    """`` (a Fortran exponent: write 1.0E-03)`` for ``1.0D-03``, else ``""``."""
    if _FORTRAN.fullmatch(text) is None:
        return ""
    return f" (a Fortran exponent: write {text.replace('D', 'E').replace('d', 'e')})"


#: Formats whose ASE reader gives each frame's forces a calculator with ``energy=0.0``, an
#: energy the file does not hold (ase/io/lammpsrun.py): read as absent, not as zero.
_NO_ENERGY = frozenset({"lammps-dump-text", "lammps-dump-binary"})


def _parse_ase(path: Location, index: FileIndex, start: int, stop: int, keys: LabelKeys) -> _Parsed:
    import ase.io

    local = path.require_local(f"reading {index.format!r} files (through ASE)")
    # the random-access copy of a format ASE reads only from its start (io/_frames.py)
    where, fmt = (local, index.format) if index.frames is None else (index.frames, "traj")
    try:
        frames = cast(
            "list[ase.Atoms]", ase.io.read(str(where), index=f"{start}:{stop}", format=fmt)
        )  # a slice: a list
    except Exception as exc:  # noqa: BLE001 - reported with file, frame and reason
        return (
            StructureBatch.empty(),
            np.zeros(0, np.int64),
            {i: (0, f"ASE cannot read it: {exc}") for i in range(start, stop)},
        )
    if index.format in _NO_ENERGY:
        for atoms in frames:  # ASE's placeholder, not the file's: absent (NaN)
            if atoms.calc is not None:
                atoms.calc.results.pop("energy", None)
    absent = {start + k: keys.absent_from_ase(a) for k, a in enumerate(frames)}
    errors = {i: (0, reason) for i, reason in absent.items() if reason is not None}
    kept = [k for k in range(len(frames)) if start + k not in errors]
    batch = StructureBatch.from_ase(
        [frames[k] for k in kept], energy_key=keys.energy, forces_key=keys.forces
    )
    return batch, np.asarray(kept, np.int64) + start, errors
