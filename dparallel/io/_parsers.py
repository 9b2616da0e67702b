"""Parse a byte range of a structure file into a :class:`StructureBatch`.

Each parser returns ``(batch, kept, errors)``: ``batch`` holds the structures that parsed
(not yet validated), ``kept`` (k,) their file indices, and ``errors`` maps a file index to
``(line, reason)`` for the ones that did not.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np

from dparallel.io._index import FileIndex
from dparallel.types import StructureBatch

__all__ = ["parse_range"]

_Parsed = tuple[StructureBatch, np.ndarray, dict[int, tuple[int, str]]]


def _read_bytes(path: Path, start: int, stop: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(stop - start)


def parse_range(path: Path, index: FileIndex, start: int, stop: int) -> _Parsed:
    """Parse structures ``[start, stop)`` of ``path`` using its ``index``."""
    if stop <= start:
        return StructureBatch.empty(), np.zeros(0, np.int64), {}
    if index.format == "n2p2":
        return _parse_n2p2(path, index, start, stop)
    if index.format == "extxyz":
        return _parse_extxyz(path, index, start, stop)
    return _parse_ase(path, index, start, stop)


# ------------------------------------------------------------------ extxyz
_PROPS = re.compile(r"Properties=([^\s\"]+|\"[^\"]*\")", re.IGNORECASE)


def _diagnose_extxyz(text: str, line0: int) -> tuple[int, str] | None:
    """Find the first bad line of one extxyz frame; ``None`` when nothing obvious is wrong."""
    from ase.data import atomic_numbers

    rows = text.splitlines()
    if len(rows) < 2:
        return None
    m = _PROPS.search(rows[1])
    spec = (m.group(1).strip('"') if m else "species:S:1:pos:R:3").split(":")
    kinds: list[str] = []
    names: list[str] = []
    for name, kind, n in zip(spec[0::3], spec[1::3], spec[2::3], strict=False):
        kinds += [kind.upper()] * int(n)
        names += [name] * int(n)
    for k, row in enumerate(rows[2:]):
        line = line0 + 2 + k
        cols = row.split()
        if len(cols) != len(kinds):
            return line, (
                f"wrong column count: expected {len(kinds)} columns "
                f"({':'.join(spec)}), found {len(cols)}"
            )
        for c, (kind, name, value) in enumerate(zip(kinds, names, cols, strict=True)):
            if kind == "R":
                try:
                    float(value)
                except ValueError:
                    return line, f"non-numeric field {value!r} in column {c + 1} ({name})"
            elif kind == "I":
                try:
                    int(value)
                except ValueError:
                    return line, f"non-integer field {value!r} in column {c + 1} ({name})"
            elif name == "species" and value not in atomic_numbers:
                return line, f"unknown element {value!r}"
    return None


def _parse_extxyz(path: Path, index: FileIndex, start: int, stop: int) -> _Parsed:
    import ase.io

    base = int(index.starts[start])
    text = _read_bytes(path, base, int(index.ends[stop - 1])).decode("utf-8", errors="replace")
    good = [i for i in range(start, stop) if i not in index.errors]
    errors = {i: index.errors[i] for i in range(start, stop) if i in index.errors}
    if not errors:
        try:
            frames = ase.io.read(io.StringIO(text), index=":", format="extxyz")
            if len(frames) == stop - start:
                return StructureBatch.from_ase(frames), np.arange(start, stop), {}
        except Exception:  # noqa: BLE001 - fall back to frame by frame to locate the problem
            pass
    atoms_list = []
    kept = []
    ascii_text = text.isascii()  # byte offsets index the text only when it is ASCII
    for i in good:
        a, b = int(index.starts[i]) - base, int(index.ends[i]) - base
        chunk = text[a:b] if ascii_text else _read_bytes(path, a + base, b + base).decode()
        try:
            frames = ase.io.read(io.StringIO(chunk), index=":", format="extxyz")
            if len(frames) != 1:
                raise ValueError(f"expected one frame, ASE found {len(frames)}")
        except Exception as exc:  # noqa: BLE001 - reported with file, line and reason
            where = _diagnose_extxyz(chunk, int(index.lines[i]))
            errors[i] = where or (int(index.lines[i]), f"cannot parse frame: {exc}")
            continue
        atoms_list.append(frames[0])
        kept.append(i)
    return StructureBatch.from_ase(atoms_list), np.asarray(kept, np.int64), errors


# -------------------------------------------------------------------- n2p2
def _parse_n2p2(path: Path, index: FileIndex, start: int, stop: int) -> _Parsed:
    from ase.data import atomic_numbers

    errors = {i: index.errors[i] for i in range(start, stop) if i in index.errors}
    numbers: list[int] = []
    rows: list[list[float]] = []  # x y z fx fy fz per atom
    cells, pbcs, energies, counts, tags, kept = [], [], [], [], [], []
    with open(path, "rb") as f:
        for i in range(start, stop):
            if i in errors:
                continue
            f.seek(int(index.starts[i]))
            block = f.read(int(index.ends[i] - index.starts[i])).decode("utf-8", errors="replace")
            line = int(index.lines[i])
            s_numbers: list[int] = []
            s_rows: list[list[float]] = []
            lattice: list[list[float]] = []
            energy = float("nan")
            tag = ""
            try:
                for k, raw in enumerate(block.splitlines()):
                    line = int(index.lines[i]) + k
                    cols = raw.split()
                    if not cols or cols[0] in ("begin", "end", "charge"):
                        continue
                    key = cols[0]
                    if key == "comment":
                        m = re.search(r"\bset\s*=\s*(\w+)", raw)
                        tag = m.group(1) if m else tag
                    elif key == "lattice":
                        _ncols(cols, 4, "lattice x y z")
                        lattice.append([_num(c) for c in cols[1:4]])
                    elif key == "energy":
                        _ncols(cols, 2, "energy E")
                        energy = _num(cols[1])
                    elif key == "atom":
                        _ncols(cols, 10, "atom x y z element charge n fx fy fz")
                        if cols[4] not in atomic_numbers:
                            raise ValueError(f"unknown element {cols[4]!r}")
                        s_numbers.append(atomic_numbers[cols[4]])
                        s_rows.append([_num(c) for c in cols[1:4] + cols[7:10]])
                    else:
                        raise ValueError(f"unknown keyword {key!r}")
                line = int(index.lines[i])  # structure-level checks point at its 'begin'
                if len(lattice) not in (0, 3):
                    raise ValueError(f"expected 0 or 3 'lattice' lines, found {len(lattice)}")
            except ValueError as exc:
                errors[i] = (line, str(exc))
                continue
            numbers += s_numbers
            rows += s_rows
            cells.append(lattice if lattice else np.zeros((3, 3)))
            pbcs.append([bool(lattice)] * 3)
            energies.append(energy)
            counts.append(len(s_numbers))
            tags.append(tag)
            kept.append(i)
    if not kept:
        return StructureBatch.empty(), np.zeros(0, np.int64), errors
    data = np.asarray(rows, dtype=np.float64).reshape(-1, 6)  # (N, 6)
    batch = StructureBatch(
        numbers=np.asarray(numbers, np.int64),
        positions=data[:, :3],
        cells=np.asarray(cells, np.float64),
        pbc=np.asarray(pbcs, bool),
        energy=np.asarray(energies),
        forces=data[:, 3:],
        offsets=np.concatenate([[0], np.cumsum(counts)]),
        tags=np.asarray(tags, dtype=object),
    )
    return batch, np.asarray(kept, np.int64), errors


def _ncols(cols: list[str], n: int, what: str) -> None:
    if len(cols) != n:
        raise ValueError(f"wrong column count: expected {n} ({what}), found {len(cols)}")


def _num(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"non-numeric field {text!r}") from None


# --------------------------------------------------------------------- ASE
def _parse_ase(path: Path, index: FileIndex, start: int, stop: int) -> _Parsed:
    import ase.io

    try:
        frames = ase.io.read(str(path), index=f"{start}:{stop}", format=index.format)
    except Exception as exc:  # noqa: BLE001 - reported with file, frame and reason
        return (
            StructureBatch.empty(),
            np.zeros(0, np.int64),
            {i: (0, f"ASE cannot read it: {exc}") for i in range(start, stop)},
        )
    return StructureBatch.from_ase(frames), np.arange(start, stop), {}
