"""``open_source``: one indexed, picklable, random-access view of a structure file."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from ase import units as _units

from dparallel.errors import (
    InputError,
    InputFormatError,
    InvalidStructureError,
    SourceNotFoundError,
)
from dparallel.io._index import FileIndex, load_or_build_index
from dparallel.io._parsers import parse_range
from dparallel.io._validate import validate_batch
from dparallel.io.units import UNIT_SYSTEMS
from dparallel.types import StructureBatch

__all__ = ["UNITS", "ReadResult", "StructureSource", "detect_format", "open_source"]

log = logging.getLogger(__name__)

#: Unit systems a file may be in → (length factor to Å, energy factor to eV).
UNITS: dict[str, tuple[float, float]] = {
    name: {"bohr-hartree": (_units.Bohr, _units.Hartree)}.get(name, (1.0, 1.0))  # ASE's CODATA
    for name in UNIT_SYSTEMS
}
_ALIASES = {"xyz": "extxyz", "extxyz": "extxyz", "n2p2": "n2p2", "runner": "n2p2"}


@dataclass(frozen=True)
class ReadResult:
    """What :meth:`StructureSource.read_checked` returns.

    ``batch`` holds the valid structures in file order, ``indices`` (k,) int64 their
    file indices, ``skipped`` the ``(index, reason)`` of the invalid ones.
    """

    batch: StructureBatch
    indices: np.ndarray
    skipped: list[tuple[int, str]]


#: Leading bytes of compressed files → the tool that decompresses them.
_COMPRESSED = {
    b"\x1f\x8b": ("gzip", "gunzip -k"),
    b"BZh": ("bzip2", "bunzip2 -k"),
    b"\xfd7zXZ\x00": ("xz", "unxz -k"),
    b"\x28\xb5\x2f\xfd": ("zstd", "unzstd"),
}


def _refuse_compressed(path: Path) -> None:
    """Raise :class:`InputFormatError` for a compressed file, saying what to do."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return
    for magic, (kind, tool) in _COMPRESSED.items():
        if head.startswith(magic):
            raise InputFormatError(
                f"the file is {kind}-compressed: dparallel reads structures at their offsets "
                f"in the file, which a compressed file does not allow; decompress it first "
                f"({tool} {path.name}) and give the decompressed file",
                path=path,
            )


def detect_format(path: Path) -> str:
    """Guess the format: n2p2 for ``input.data``/``*.data`` or files starting with
    ``begin``/``comment``, extxyz for ``*.xyz``/``*.extxyz``, else what ASE guesses."""
    name = path.name.lower()
    if name == "input.data" or name.endswith(".data"):
        return "n2p2"
    if name.endswith((".xyz", ".extxyz")):
        return "extxyz"
    with open(path, "rb") as f:
        head = f.read(4096)
    first = next((ln.split()[0] for ln in head.splitlines() if ln.strip()), b"")
    if first in (b"begin", b"comment"):
        return "n2p2"
    if first.isdigit():
        return "extxyz"
    import ase.io.formats

    try:
        fmt = ase.io.formats.filetype(str(path), guess=True)
    except Exception as exc:
        raise InputFormatError(
            f"cannot tell the file format ({exc}); pass format= / --format", path=path
        ) from exc
    return _ALIASES.get(fmt, fmt)


class StructureSource:
    """Random access to the structures of one file.

    Built by :func:`open_source`. ``len(source)`` counts every structure the index found,
    including ones that turn out invalid when read; ``read(a, b)`` parses only the bytes
    of structures ``[a, b)``. Pickles as path + options; the index is reloaded lazily
    (from its cache) in the receiving process, which refuses a file that changed since.

    Skipped structures (``on_error="skip"``) keep their file index: ``read`` returns
    the valid structures only, ``read_checked`` also says which indices they have, and
    every skip is appended to :attr:`skipped` as ``(index, reason)``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        format: str | None = None,
        *,
        units: str = "ase",
        on_error: Literal["raise", "skip"] = "raise",
        cache_index: bool = True,
        _expect_index: str | None = None,
    ) -> None:
        self.path = Path(path).expanduser().resolve()
        if not self.path.is_file():
            raise SourceNotFoundError(f"input file not found: {self.path}")
        _refuse_compressed(self.path)
        if units not in UNITS:
            raise InputError(f"unknown units {units!r}; expected one of {sorted(UNITS)}")
        if on_error not in ("raise", "skip"):
            raise InputError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        fmt = detect_format(self.path) if format is None else format.lower()
        self.format = _ALIASES.get(fmt, fmt)
        self.units = units
        self.on_error = on_error
        self.cache_index = cache_index
        self._skipped: dict[int, str] = {}
        self._expect_index = _expect_index
        self._index: FileIndex | None = None

    @property
    def skipped(self) -> list[tuple[int, str]]:
        """``(index, reason)`` of every structure skipped by reads so far, sorted, no repeats."""
        return sorted(self._skipped.items())

    # ---------------------------------------------------------------- index
    @property
    def index(self) -> FileIndex:
        """The file's index (built or loaded on first use)."""
        if self._index is None:
            idx = load_or_build_index(self.path, self.format, cache=self.cache_index)
            expected_stat = getattr(self, "_expect_stat", None)
            changed = expected_stat is not None and expected_stat != (idx.size, idx.mtime_ns)
            if changed or (self._expect_index is not None and idx.sha256 != self._expect_index):
                raise InputError(
                    f"{self.path} changed since it was opened (index hash differs); "
                    "re-open the source"
                )
            self._index = idx
        return self._index

    def __len__(self) -> int:
        return len(self.index)

    @property
    def atom_counts(self) -> np.ndarray:
        """Atoms per structure, (S,) int64 (from the index, before validation)."""
        return self.index.counts

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
        try:
            info = os.stat(self.path)
        except OSError:
            return  # not a local file: its reader checks what it reads
        idx = self.index
        if (info.st_size, info.st_mtime_ns) != (idx.size, idx.mtime_ns):
            raise InputError(
                f"{self.path} changed while it was being read (size {idx.size:,} → "
                f"{info.st_size:,} bytes, modified since it was indexed): what was read may "
                "mix two versions. Leave the input alone while a run reads it, then rerun "
                "(a store made from the old version is refused, not mixed)"
            )

    # ------------------------------------------------------------------ read
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
        batch, kept, errors = parse_range(self.path, self.index, start, stop)
        self.check_unchanged()  # what was read is the file the index (and fingerprint) describe
        bad = {int(kept[k]): reason for k, reason in validate_batch(batch).items()}
        problems: dict[int, tuple[int, str, bool]] = {
            i: (line, reason, False) for i, (line, reason) in errors.items()
        }
        for i, reason in bad.items():
            problems[i] = (int(self.index.lines[i]), reason, True)
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
            keep = np.array([int(i) not in bad for i in kept])
            batch = StructureBatch.concatenate(
                [batch.select(int(k), int(k) + 1) for k in np.flatnonzero(keep)]
            )
            kept = kept[keep]
        self._skipped.update(skipped)
        return ReadResult(self._convert(batch), np.asarray(kept, np.int64), skipped)

    def _convert(self, batch: StructureBatch) -> StructureBatch:
        length, energy = UNITS[self.units]
        if length == 1.0 and energy == 1.0:
            return batch
        return StructureBatch(
            numbers=batch.numbers,
            positions=batch.positions * length,
            cells=batch.cells * length,
            pbc=batch.pbc,
            energy=batch.energy * energy,
            forces=batch.forces * (energy / length),
            offsets=batch.offsets,
            tags=batch.tags,
        )

    # -------------------------------------------------------------- pickling
    def __getstate__(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": self.format,
            "units": self.units,
            "on_error": self.on_error,
            "cache_index": self.cache_index,
            "expect": self._index.sha256 if self._index is not None else self._expect_index,
            "stat": (self._index.size, self._index.mtime_ns)
            if self._index is not None
            else getattr(self, "_expect_stat", None),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["path"],
            state["format"],
            units=state["units"],
            on_error=state["on_error"],
            cache_index=state["cache_index"],
            _expect_index=state["expect"],
        )
        stat = state.get("stat")
        self._expect_stat = None if stat is None else (int(stat[0]), int(stat[1]))

    def __repr__(self) -> str:
        n = len(self._index) if self._index is not None else "?"
        return f"StructureSource({str(self.path)!r}, format={self.format!r}, structures={n})"


def open_source(
    path: str | os.PathLike[str],
    format: str | None = None,
    *,
    units: str = "ase",
    on_error: Literal["raise", "skip"] = "raise",
    cache_index: bool = True,
) -> StructureSource:
    """Open a structure file for indexed random access.

    Parameters
    ----------
    path
        extxyz/xyz, n2p2 ``input.data``, or any file ASE reads.
    format
        ``"extxyz"``, ``"n2p2"`` (alias ``"runner"``) or an ASE format name; guessed if None.
    units
        Units of the file: ``"ase"`` (Å, eV; no conversion) or ``"bohr-hartree"``
        (converted to Å, eV and eV/Å).
    on_error
        ``"raise"`` on the first bad structure, or ``"skip"`` it and record it.
    cache_index
        Cache the index beside the file (or in ``~/.cache/dparallel``).

    Returns
    -------
    StructureSource
        Indexed eagerly, so an empty or unparseable file fails here.
    """
    source = StructureSource(path, format, units=units, on_error=on_error, cache_index=cache_index)
    _ = source.index
    return source
