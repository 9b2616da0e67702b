"""Find and run the n2p2 command-line tools (``nnp-scaling``, ``nnp-dataset``, …).

For tests and benchmarks that compare dparallel with n2p2 itself; nothing else in
dparallel needs n2p2. The tools are looked up in ``$N2P2_BIN``, ``$N2P2_HOME/bin`` and
``~/.cache/n2p2-61daa0df/bin`` (where ``../shared/n2p2/build.sh`` puts them).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dparallel._files import write_file
from dparallel.errors import DParallelError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "N2p2RunError",
    "find_bin_dir",
    "log_networks",
    "log_symmetry_function_lines",
    "read_output_data",
    "run_tool",
    "stage",
]

_DEFAULT_HOME = Path.home() / ".cache" / "n2p2-61daa0df"


class N2p2RunError(DParallelError, RuntimeError):
    """An n2p2 tool failed or timed out; the message ends with its last output lines."""


def find_bin_dir() -> Path | None:
    """Directory holding the n2p2 tools, or None when they are not built."""
    env = os.environ
    given = [
        Path(env[k]) / sub for k, sub in (("N2P2_BIN", ""), ("N2P2_HOME", "bin")) if env.get(k)
    ]
    for c in [*given, _DEFAULT_HOME / "bin"]:
        if (c / "nnp-dataset").is_file() and os.access(c / "nnp-dataset", os.X_OK):
            return c
    return None


def stage(workdir: str | os.PathLike[str], files: Mapping[str, str | os.PathLike[str]]) -> Path:
    """Create ``workdir`` with ``files`` (name → source path, copied) and return it."""
    d = Path(workdir)
    d.mkdir(parents=True, exist_ok=True)
    for name, src in files.items():
        write_file(d / name, Path(src).read_bytes())
    return d


def run_tool(
    name: str,
    workdir: str | os.PathLike[str],
    args: Sequence[str] = (),
    timeout: float = 300.0,
    bin_dir: Path | None = None,
) -> str:
    """Run n2p2 tool ``name`` in ``workdir`` (one process, no mpirun); returns its stdout.

    Raises
    ------
    N2p2RunError
        The tools are not built, the run failed (n2p2 aborts on bad input) or timed out.
    """
    bin_dir = bin_dir or find_bin_dir()
    if bin_dir is None:
        raise N2p2RunError("n2p2 is not built (run ../shared/n2p2/build.sh)")
    exe = bin_dir / name
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    try:
        proc = subprocess.run(
            [str(exe), *args],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise N2p2RunError(f"{name} {' '.join(args)} timed out after {timeout} s") from None
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).splitlines()
        errors = [ln.strip() for ln in lines if "ERROR" in ln or "what():" in ln]
        tail = "\n".join(errors or lines[-15:])
        raise N2p2RunError(f"{name} {' '.join(args)} failed ({proc.returncode}):\n{tail}")
    return proc.stdout


def read_output_data(path: str | os.PathLike[str]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Energies (S,) and forces [(N_s, 3)] of an n2p2 ``output.data`` (file units, 16 digits)."""
    energies: list[float] = []
    forces: list[np.ndarray] = []
    current: list[list[float]] = []
    for line in Path(path).read_text().splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "begin":
            current = []
        elif words[0] == "atom":
            current.append([float(w) for w in words[7:10]])
        elif words[0] == "energy":
            energies.append(float(words[1]))
        elif words[0] == "end":
            forces.append(np.array(current).reshape(-1, 3))
    return np.array(energies), forces


def log_networks(log: str) -> dict[str, tuple[list[int], list[str]]]:
    """Element → (layer sizes, activation code per non-input layer) from an n2p2 log.

    Parsed from the "Atomic short range NN for element X" tables of the setup log.
    """
    out: dict[str, tuple[list[int], list[str]]] = {}
    lines = log.splitlines()
    for k, line in enumerate(lines):
        if line.startswith("Atomic short range NN for element"):
            element = line.split()[-2] if line.split()[-1] == ":" else line.split()[-1]
            arch = next(x for x in lines[k:] if x.startswith("Architecture"))
            sizes = [int(w) for w in arch.split()[1:]]
            first = next(x for x in lines[k + 1 :] if x.split()[:2] == ["1", "G"])
            out[element] = (sizes, first.split()[2:])
    return out


def log_symmetry_function_lines(log: str) -> dict[str, list[int]]:
    """Element → input.nn line number (1-based) of each symmetry function, in n2p2's order.

    Parsed from the "Short range atomic symmetry functions element X" tables (column ln).
    """
    out: dict[str, list[int]] = {}
    current: list[int] | None = None
    for line in log.splitlines():
        if line.startswith("Short range atomic symmetry functions element"):
            current = out.setdefault(line.split()[-2], [])
        elif current is not None:
            words = line.split()
            if words and words[0].isdigit() and len(words) > 4:
                current.append(int(words[-1]))
            elif line.startswith("Minimum cutoff") or line.startswith("*****"):
                current = None
    return out
