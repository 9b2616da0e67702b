"""A random-access copy of a file ASE reads only from its start.

ASE reads a ``.traj`` (its offsets) and an ASE database (``db``, its rows) by index, but
parses a VASP ``OUTCAR``/``vasprun.xml``/``XDATCAR``, a cif, a LAMMPS dump, QE or CP2K
output from its beginning up to (often past) the structures asked for: every partition's
task would parse the whole file (1% of 2,000 cif structures took 11.6 s, the whole index
pass 1.9 s). So the index pass, which reads every structure once anyway, also writes them
to an ASE trajectory beside the index cache (``FILE.dpframes``, float64 as ASE read
them), and a task reads its structures from that copy (:func:`frames_path`).

A ``.traj`` keeps positions, cell, pbc, numbers, ``info`` and the calculator results ASE
knows (energy, free_energy, forces, stress, ...), not other per-atom arrays nor other
results: where a structure holds a label such a key could name (a scalar result, an
``(n, 3)`` array or result), no copy is made and tasks read the file through ASE.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from typing import TYPE_CHECKING

import numpy as np

from dparallel._files import temporary_name

if TYPE_CHECKING:
    from pathlib import Path

    import ase
    from ase.io.trajectory import TrajectoryWriter

__all__ = ["RANDOM_ACCESS", "FramesCopy", "first_copy", "frames_path", "recorded_copy"]

log = logging.getLogger(__name__)

#: ASE formats ASE itself reads a structure of by index, without the ones before it.
RANDOM_ACCESS = frozenset({"traj", "db"})

#: Per-atom arrays a .traj keeps (ase/io/trajectory.py ``write_atoms``).
_KEPT_ARRAYS = frozenset(
    {"numbers", "positions", "masses", "tags", "momenta", "initial_magmoms", "initial_charges"}
)


def frames_path(cache: Path) -> Path:
    """The copy beside the index cache ``cache`` (``FILE.dpindex.npz`` → ``FILE.dpframes``)."""
    return cache.with_name(cache.name.removesuffix(".dpindex.npz") + ".dpframes")


def _lost(atoms: ase.Atoms) -> str | None:
    """What of ``atoms`` a label key could name that a .traj would not keep; ``None``."""
    from ase.calculators.calculator import all_properties

    n = len(atoms)
    arrays = [k for k, v in atoms.arrays.items() if k not in _KEPT_ARRAYS and v.shape == (n, 3)]
    if arrays:
        return f"per-atom array {arrays[0]!r}"
    results = getattr(atoms.calc, "results", None) or {}
    for key, value in results.items():
        if key not in all_properties and np.shape(value) in ((), (n, 3)):
            return f"calculator result {key!r}"
    return None


def _results(atoms: ase.Atoms) -> dict[str, object]:
    """The results of ``atoms``'s calculator that a .traj keeps (those ASE knows)."""
    from ase.calculators.calculator import all_properties

    results = getattr(atoms.calc, "results", None) or {}
    return {key: value for key, value in results.items() if key in all_properties}


class FramesCopy:
    """Writes the copy at ``target`` (``None``: none): :meth:`add` each structure in
    order, then :meth:`done` puts it in place, or :meth:`drop` leaves nothing. A directory
    that is not writable, a full disk, or a structure holding what a .traj loses (logged)
    give no copy; tasks then read the file through ASE."""

    def __init__(self, target: Path | None) -> None:
        self.target = target
        self._tmp: Path | None = None
        self._writer: TrajectoryWriter | None = None
        if target is None:
            return
        from ase.io.trajectory import TrajectoryWriter

        self._tmp = temporary_name(target)
        try:
            # the results given (add): ASE would compare the structure with its calculator's
            # once per property it knows (13 of them), 3x the time of the whole write
            self._writer = TrajectoryWriter(str(self._tmp), "w", properties=[])
        except OSError as exc:
            log.debug("cannot write %s: %s", target, exc)

    @property
    def writing(self) -> bool:
        """Whether a copy is being written."""
        return self._writer is not None

    def add(self, atoms: ase.Atoms) -> None:
        """Append ``atoms`` (as ASE read it)."""
        if self._writer is None:
            return
        reason = _lost(atoms)
        if reason is not None:
            log.info("no random-access copy of %s: its %s would be lost", self.target, reason)
            self.drop()
            return
        try:
            with warnings.catch_warnings():  # info ASE cannot encode: not a label
                warnings.simplefilter("ignore")
                self._writer.write(atoms, **_results(atoms))
        except OSError as exc:
            log.debug("cannot write %s: %s", self.target, exc)
            self.drop()

    def done(self) -> Path | None:
        """Put the copy in place; its path, or ``None`` where there is none."""
        if self._writer is None or self._tmp is None or self.target is None:
            return None
        try:
            self._writer.close()
            os.replace(self._tmp, self.target)
        except OSError as exc:
            log.debug("cannot write %s: %s", self.target, exc)
            self.drop()
            return None
        self._writer = None
        return self.target

    def drop(self) -> None:
        """Leave no copy (a half-written one is removed)."""
        writer, self._writer = self._writer, None
        with contextlib.suppress(OSError):
            if writer is not None:
                writer.close()
            if self._tmp is not None:
                self._tmp.unlink(missing_ok=True)


def first_copy(candidates: list[Path]) -> FramesCopy:
    """A copy written beside the first of the index's ``candidates`` that can hold it."""
    for cache in candidates:
        with contextlib.suppress(OSError):
            cache.parent.mkdir(parents=True, exist_ok=True)
        copy = FramesCopy(frames_path(cache))
        if copy.writing:
            return copy
    return FramesCopy(None)


def recorded_copy(cache: Path, stat: np.ndarray | None) -> Path | None:
    """The copy beside ``cache`` while it is the one the index recorded (``stat``: its
    size and mtime_ns), else ``None``."""
    if stat is None:
        return None
    path = frames_path(cache)
    try:
        info = path.stat()
    except OSError:
        return None
    return path if [info.st_size, info.st_mtime_ns] == [int(v) for v in stat] else None
