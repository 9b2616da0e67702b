"""``open_source``: one indexed, picklable, random-access view of a structure file."""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dparallel.errors import (
    InputError,
    InputFormatError,
    InvalidStructureError,
    SourceChangedError,
    SourceNotFoundError,
)
from dparallel.io._index import FileIndex, load_or_build_index
from dparallel.io._indexers import BOM
from dparallel.io._parsers import parse_range, report_labels
from dparallel.io._text import COMPRESSIONS, compression, open_stream, read_range
from dparallel.io._validate import find_problems
from dparallel.io.location import Location, as_location
from dparallel.io.units import UNIT_SYSTEMS, check_units, unit_factors
from dparallel.types import LabelKeys

if TYPE_CHECKING:
    from pathlib import Path

    from dparallel.types import StructureBatch

__all__ = [
    "UNITS",
    "ReadResult",
    "StructureSource",
    "check_source_file",
    "detect_format",
    "known_format",
    "open_source",
]

log = logging.getLogger(__name__)

#: Unit systems a file may be in → (length factor to Å, energy factor to eV).
UNITS: dict[str, tuple[float, float]] = {name: unit_factors(name) for name in UNIT_SYSTEMS}
_ALIASES = {"xyz": "extxyz", "runner": "n2p2"}


def check_source_file(location: Location) -> None:
    """Raise unless ``location`` is a file to read structures from: a folder or a device
    is an :class:`InputError`, nothing there a :class:`SourceNotFoundError` (a URL is
    asked whether its object exists)."""
    if location.is_file():
        return
    local = location.local
    if local is not None and local.is_dir():
        store = " (a zarr store? structures are read from the file it was made from)"
        raise InputError(
            f"{location} is a folder, not a structure file"
            + (store if (local / "zarr.json").is_file() else "")
        )
    if local is not None and local.exists():
        raise InputError(f"{location} is not a regular file (a device or a pipe)")
    raise SourceNotFoundError(f"input file not found: {location}")


@dataclass(frozen=True)
class ReadResult:
    """What :meth:`StructureSource.read_checked` returns: ``batch``, the valid structures in
    file order, ``indices`` (k,) int64 their file indices, ``skipped`` the invalid ones'
    ``(index, reason)``."""

    batch: StructureBatch
    indices: np.ndarray
    skipped: list[tuple[int, str]]


#: Leading bytes of compressed files → the tool that decompresses them (gzip, bzip2 and
#: xz are read as such when the file's name ends in ``.gz``, ``.bz2``, ``.xz``).
_COMPRESSED = {
    b"\x1f\x8b": ("gzip", "gunzip -k"),
    b"BZh": ("bzip2", "bunzip2 -k"),
    b"\xfd7zXZ\x00": ("xz", "unxz -k"),
    b"\x28\xb5\x2f\xfd": ("zstd", "unzstd"),
}


def _refuse_compressed(location: Location) -> None:
    """Raise :class:`InputFormatError` for a local compressed file dparallel cannot read
    (zstd; gzip, bzip2, xz not named so), saying what to do."""
    if location.local is None or compression(location):
        return
    try:
        with open(location.local, "rb") as f:
            head = f.read(6)
    except OSError:
        return
    suffixes = {kind: suffix for suffix, kind in COMPRESSIONS.items()}
    for magic, (kind, tool) in _COMPRESSED.items():
        if head.startswith(magic):
            also = f" or name it ….{suffixes[kind][1:]}" if kind in suffixes else ""
            raise InputFormatError(
                f"the file is {kind}-compressed: dparallel reads plain text and gzip, bzip2 "
                f"and xz files named ….gz, ….bz2, ….xz; decompress it first ({tool} "
                f"{location.name}){also}",
                path=location.local,
            )


def format_by_name(name: str) -> str | None:
    """The format a file's name (its last component) says: n2p2 for ``input.data`` or
    ``*.data``, extxyz for ``*.xyz``/``*.extxyz`` (each also ``.gz``, ``.bz2``, ``.xz``);
    ``None``: the name does not say (:func:`detect_format` then reads the file)."""
    name = name.lower().removesuffix(compression(name) or "")
    if name == "input.data" or name.endswith(".data"):
        return "n2p2"
    if name.endswith((".xyz", ".extxyz")):
        return "extxyz"
    return None


def format_name(name: str) -> str:
    """A format as the readers name it: lower case, aliases resolved (xyz → extxyz,
    runner → n2p2)."""
    return _ALIASES.get(name.lower(), name.lower())


def detect_format(path: Path | Location) -> str:
    """Guess the format: n2p2 for ``input.data``/``*.data`` or files starting with
    ``begin``/``comment``, extxyz for ``*.xyz``/``*.extxyz`` (each also ``.gz``, ``.bz2``,
    ``.xz``), else what ASE guesses (local files only)."""
    location = as_location(path)
    by_name = format_by_name(location.name)
    if by_name is not None:
        return by_name
    with open_stream(location) as f:
        head = f.read(4096).removeprefix(BOM)
    first = next((ln.split()[0] for ln in head.splitlines() if ln.strip()), b"")
    if first in (b"begin", b"comment"):
        return "n2p2"
    if first.isdigit():
        return "extxyz"
    import ase.io.formats

    if location.local is None or compression(location):
        raise InputFormatError(
            "cannot tell the file format; pass format= / --format", path=str(location)
        )
    try:
        fmt = ase.io.formats.filetype(str(location.local), guess=True)
    except Exception as exc:
        raise InputFormatError(
            f"cannot tell the file format ({exc}); pass format= / --format", path=str(location)
        ) from exc
    fmt = _ALIASES.get(fmt, fmt)
    if fmt not in ase.io.formats.ioformats and fmt not in ("extxyz", "n2p2"):
        # ASE's last guess is the bare suffix (``foo``, ``lmp``), which no reader has
        raise InputFormatError(
            f"cannot tell the file format (ASE has no format {fmt!r}); pass format= / "
            "--format (extxyz, n2p2 or an ASE format such as lammps-data, vasp, traj)",
            path=str(location),
        )
    return fmt


def known_format(name: str) -> bool:
    """Whether a reader has the format ``name`` (any case): extxyz, n2p2, their aliases
    (xyz, runner) or one of ASE's. The one rule (``open_source``, ``dataset.format``).
    ASE's formats are imported only for another name (``ase.io`` pulls in scipy)."""
    fmt = format_name(name)
    if fmt in ("extxyz", "n2p2"):
        return True
    import ase.io.formats

    return fmt in ase.io.formats.ioformats


def _check_format(given: str, location: Location) -> None:
    """An :class:`InputFormatError` when no reader has the format ``given``."""
    if not known_format(given):
        raise InputFormatError(
            f"unknown format {given!r}: expected extxyz (alias xyz), n2p2 (alias runner) or "
            "an ASE format such as lammps-data, vasp, traj",
            path=str(location),
        )


class StructureSource:
    """Random access to the structures of one file (built by :func:`open_source`).

    ``len(source)`` counts every structure the index found, including ones that turn out
    invalid when read; ``read(a, b)`` parses only the bytes of structures ``[a, b)``.
    Pickles as path + options; the index is reloaded lazily (from its cache) in the
    receiving process, which refuses a file that changed since. Skipped structures
    (``on_error="skip"``) keep their file index: ``read`` returns the valid ones,
    ``read_checked`` also their indices, and :attr:`skipped` lists ``(index, reason)``.
    :attr:`labels` are the keys the energy and forces are read from.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Location,
        format: str | None = None,
        *,
        units: str = "ase",
        on_error: Literal["raise", "skip"] = "raise",
        cache_index: bool = True,
        energy_key: str | None = None,
        forces_key: str | None = None,
        _expect_index: str | None = None,
    ) -> None:
        location = as_location(path)
        if location.local is not None:
            location = as_location(location.local.resolve(), location.options)
        #: Where the file is (a local path or a URL).
        self.location = location
        #: The local path, or the URL (for messages).
        self.path: Path | str = location.local if location.local is not None else location.url
        # a copy sent to a task (``_expect_index``) finds its file on first use, in the
        # task: raised while Dask unpickles the task, a missing file killed the worker
        if _expect_index is None:
            check_source_file(location)
        if _expect_index is None:  # a task's copy: checked when the source was opened
            _refuse_compressed(location)
        check_units(units, f"{location}: units", InputError)
        if on_error not in ("raise", "skip"):
            raise InputError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.format = detect_format(location) if format is None else format_name(format)
        if format is not None:
            _check_format(format, location)
        #: The keys the labels are read from (:class:`~dparallel.types.LabelKeys`).
        self.labels = _label_keys(energy_key, forces_key, self.format, location)
        self.units = units
        self.on_error = on_error
        self.cache_index = cache_index
        self._skipped: dict[int, str] = {}
        self._expect_index = _expect_index
        self._expect_stat: tuple[int, int] | None = None  # (size, mtime_ns) when pickled
        self._index: FileIndex | None = None

    @property
    def skipped(self) -> list[tuple[int, str]]:
        """``(index, reason)`` of every structure skipped by reads so far, sorted, no repeats."""
        return sorted(self._skipped.items())

    @property
    def index(self) -> FileIndex:
        """The file's index (built or loaded on first use)."""
        if self._index is None:
            try:
                idx = load_or_build_index(self.location, self.format, cache=self.cache_index)
            except FileNotFoundError:
                raise SourceNotFoundError(f"input file not found: {self.location}") from None
            stat = self._expect_stat
            changed = stat is not None and stat != (idx.size, idx.mtime_ns)
            if changed or (self._expect_index is not None and idx.sha256 != self._expect_index):
                raise SourceChangedError(
                    f"{self.path} changed since it was opened (index hash differs); "
                    "re-open the source"
                )
            self._index = idx
        return self._index

    def __len__(self) -> int:
        return len(self.index)

    @property
    def atom_counts(self) -> np.ndarray:
        """Atoms per structure that partitions are planned for, (S,) int64: the index's
        counts (before validation), 0 for a frame broken beyond parsing (refused or
        skipped, never stored; its count line may claim atoms the file does not hold,
        which would size every partition's atom slots)."""
        idx = self.index
        if not idx.errors:
            return idx.counts
        counts = idx.counts.copy()
        counts[np.fromiter(idx.errors, np.int64, len(idx.errors))] = 0
        return counts

    def fingerprint(self) -> dict[str, Any]:
        """Identity of the file: path, size, mtime, format, counts and index/content hashes."""
        idx = self.index
        return {
            "path": str(self.path),
            "format": self.format,
            "size": idx.size,
            "mtime_ns": idx.mtime_ns,
            "n_structures": len(idx),
            "n_atoms": int(idx.counts.sum()),
            "index_sha256": idx.sha256,
            "sample_sha256": idx.sample_sha256,
        }

    def check_unchanged(self) -> None:
        """Raise :class:`InputError` if the file is no longer the one indexed (its size or
        modification time changed): structures read from it now may belong to another
        version than the fingerprint a store records."""
        if self.location.local is None:
            return  # at a URL: its reader checks what it reads
        try:
            info = os.stat(self.location.local)
        except OSError:
            return
        idx = self.index
        if (info.st_size, info.st_mtime_ns) != (idx.size, idx.mtime_ns):
            raise SourceChangedError(
                f"{self.path} changed while it was being read (size {idx.size:,} → "
                f"{info.st_size:,} bytes, modified since it was indexed): what was read may "
                "mix two versions. Leave the input alone while a run reads it, then rerun "
                "(a store made from the old version is refused, not mixed)"
            )

    def read(self, start: int = 0, stop: int | None = None) -> StructureBatch:
        """Valid structures of ``[start, stop)`` as one batch (cost O(stop − start))."""
        return self.read_checked(start, stop).batch

    def read_checked(self, start: int = 0, stop: int | None = None) -> ReadResult:
        """Like :meth:`read`, plus the file indices kept and the ``(index, reason)`` skipped.

        Raises :class:`InputFormatError` / :class:`InvalidStructureError` (file, line,
        structure, reason) on the first bad structure unless ``on_error="skip"``.
        """
        n = len(self)
        stop = n if stop is None else stop
        if not 0 <= start <= stop <= n:
            raise IndexError(f"structure range [{start}, {stop}) outside [0, {n})")
        batch, kept, errors = parse_range(self.location, self.index, start, stop, self.labels)
        self.check_unchanged()  # what was read is the file the index (and fingerprint) describe
        bad = {int(kept[k]): problem for k, problem in find_problems(batch).items()}
        problems = {i: (line, reason, False) for i, (line, reason) in errors.items()}
        problems |= {i: (self.line_of(i, p.atom), p.reason, True) for i, p in bad.items()}
        if problems and self.on_error == "raise":
            i = min(problems)
            line, reason, invalid = problems[i]
            cls = InvalidStructureError if invalid else InputFormatError
            raise cls(reason, path=self.path, line=line or None, frame=i)
        skipped = []
        for i in sorted(problems):
            line, reason, _ = problems[i]
            where = f"line {line}: " if line else ""
            skipped.append((i, f"{where}{reason}"))
            log.warning("skipping structure %d of %s: %s%s", i, self.path, where, reason)
        if bad:
            keep = np.flatnonzero([int(i) not in bad for i in kept])
            batch, kept = batch.take(keep), kept[keep]
        self._skipped.update(skipped)
        return ReadResult(self._convert(batch), np.asarray(kept, np.int64), skipped)

    def line_of(self, i: int, atom: int | None = None) -> int:
        """The line of atom ``atom`` (its index in the structure) of structure ``i``, else
        (``atom=None``, or a format whose atoms have no lines of their own) the structure's
        first line; 0: unknown, as for formats ASE reads."""
        line = int(self.index.lines[i])
        if not line or atom is None:
            return line
        if self.format == "extxyz":  # the count line, the comment line, then one per atom
            return line + 2 + atom
        if self.format != "n2p2":
            return line
        text = read_range(self.location, int(self.index.starts[i]), int(self.index.ends[i]))
        atoms = [k for k, row in enumerate(text.splitlines()) if row.split()[:1] == [b"atom"]]
        return line + atoms[atom] if atom < len(atoms) else line

    def _convert(self, batch: StructureBatch) -> StructureBatch:
        length, energy = UNITS[self.units]
        if length == 1.0 and energy == 1.0:
            return batch
        return dataclasses.replace(
            batch,
            positions=batch.positions * length,
            cells=batch.cells * length,
            energy=batch.energy * energy,
            forces=batch.forces * (energy / length),
        )

    def __getstate__(self) -> dict[str, Any]:
        idx = self._index
        return {
            "path": self.location,
            "format": self.format,
            "units": self.units,
            "on_error": self.on_error,
            "cache_index": self.cache_index,
            "labels": tuple(self.labels),
            "expect": self._expect_index if idx is None else idx.sha256,
            "stat": self._expect_stat if idx is None else (idx.size, idx.mtime_ns),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["path"],
            state["format"],
            units=state["units"],
            on_error=state["on_error"],
            cache_index=state["cache_index"],
            energy_key=state["labels"][0],
            forces_key=state["labels"][1],
            _expect_index=state["expect"],
        )
        stat = state.get("stat")
        self._expect_stat = None if stat is None else (int(stat[0]), int(stat[1]))

    def __repr__(self) -> str:
        n = len(self._index) if self._index is not None else "?"
        return f"StructureSource({str(self.path)!r}, format={self.format!r}, structures={n})"


def _label_keys(
    energy_key: str | None, forces_key: str | None, format: str, location: Location
) -> LabelKeys:
    """The :class:`LabelKeys` given, checked: each ``None`` or a non-empty string without
    blanks, none for n2p2 (whose labels have fixed places); else an :class:`InputError`."""
    keys = LabelKeys(energy_key, forces_key)
    for name, key in keys.given().items():
        if not isinstance(key, str) or not key or key.split() != [key]:
            raise InputError(
                f"{location}: {name} must be a key of the file (a word such as dft_energy), "
                f"got {key!r}"
            )
    if keys.given() and format == "n2p2":
        raise InputError(
            f"{location}: {' and '.join(keys.given())} cannot be given for an n2p2 file, whose "
            "energy and forces have fixed places (its energy line and atom columns); drop "
            "them (--energy-key, --forces-key, dataset.energy_key, dataset.forces_key)"
        )
    return keys


def open_source(
    path: str | os.PathLike[str] | Location,
    format: str | None = None,
    *,
    units: str = "ase",
    on_error: Literal["raise", "skip"] = "raise",
    cache_index: bool = True,
    energy_key: str | None = None,
    forces_key: str | None = None,
) -> StructureSource:
    """Open a structure file for indexed random access.

    Parameters
    ----------
    path
        extxyz/xyz, n2p2 ``input.data`` (each also ``.gz``, ``.bz2``, ``.xz``), or any file
        ASE reads (local only): a path, a URL (``s3://…``, ``memory://…``) or a
        :class:`~dparallel.io.location.Location` (URL with ``storage_options``).
    format
        ``"extxyz"``, ``"n2p2"`` (alias ``"runner"``) or an ASE format name; guessed if None.
    units
        Units of the file: ``"ase"`` (Å, eV; no conversion) or ``"bohr-hartree"``
        (converted to Å, eV and eV/Å).
    on_error
        ``"raise"`` on the first bad structure, or ``"skip"`` it and record it.
    cache_index
        Cache the index beside a local file (or in ``~/.cache/dparallel``, always for a URL).
    energy_key, forces_key
        Where the labels are: the extxyz comment-line key (``atoms.info`` key or calculator
        result for other ASE formats) of the energy, the ``Properties`` column
        (``atoms.arrays`` key or calculator result) of the forces. ``None``: ``energy``,
        else ``REF_energy``; ``forces``, else ``REF_forces`` (NaN where absent). A key given
        must be in every structure (``on_error`` says what a structure without it does);
        refused for n2p2 files.

    Returns
    -------
    StructureSource
        Indexed eagerly, so an empty or unparseable file fails here. The comment line of
        an extxyz file's first structure is read too: labels under keys that are not read
        are logged here (io/_labels.py), in the process that starts a run.
    """
    source = StructureSource(
        path,
        format,
        units=units,
        on_error=on_error,
        cache_index=cache_index,
        energy_key=energy_key,
        forces_key=forces_key,
    )
    index = source.index
    if source.format == "extxyz":  # its labels' keys said here, not only in a worker's log
        report_labels(source.location, index, 0, source.labels)
    return source
