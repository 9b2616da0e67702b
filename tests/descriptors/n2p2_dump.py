"""n2p2's own symmetry functions for given structures (tests only).

Compiles ``n2p2_symfunc_dump.cpp`` against n2p2's libnnp (built by
``../shared/n2p2/build.sh`` into ``$N2P2_HOME``, default ``~/.cache/n2p2-61daa0df``) and
parses what it prints. :func:`unavailable` says why this cannot run here (tests skip).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import ase

HOME = Path(os.environ.get("N2P2_HOME", Path.home() / ".cache" / "n2p2-61daa0df"))
EIGEN = Path("/usr/include/eigen3")
SOURCE = Path(__file__).with_name("n2p2_symfunc_dump.cpp")


def unavailable() -> str | None:
    """Why n2p2's library cannot be used here, or None."""
    if not (HOME / "lib" / "libnnp.a").is_file() or not (HOME / "include" / "Mode.h").is_file():
        return f"n2p2 is not built in {HOME} (run ../shared/n2p2/build.sh)"
    if shutil.which("g++") is None or not EIGEN.is_dir():
        return "g++ or Eigen headers missing (needed to link against n2p2's libnnp)"
    return None


def build(out_dir: Path) -> Path:
    """Compile the dumper into ``out_dir``; returns the executable."""
    exe = out_dir / "n2p2_symfunc_dump"
    cmd = ["g++", "-O2", "-std=c++11", f"-I{HOME / 'include'}", f"-I{EIGEN}", str(SOURCE)]
    cmd += [str(HOME / "lib" / "libnnp.a"), "-lgsl", "-lgslcblas", "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return exe


def write_input_data(path: Path, structures: list[ase.Atoms]) -> None:
    """n2p2 ``input.data`` (positions in the structures' units, zero energies and forces)."""
    lines = []
    for atoms in structures:
        lines += ["begin", "comment written by the dparallel tests"]
        if atoms.pbc.any():
            lines += [f"lattice {v[0]:.16e} {v[1]:.16e} {v[2]:.16e}" for v in atoms.cell[:]]
        for p, s in zip(atoms.positions, atoms.get_chemical_symbols(), strict=True):
            lines.append(f"atom {p[0]:.16e} {p[1]:.16e} {p[2]:.16e} {s} 0.0 0.0 0.0 0.0 0.0")
        lines += ["energy 0.0", "charge 0.0", "end"]
    path.write_text("\n".join(lines) + "\n")


@dataclass
class N2p2SymmetryFunctions:
    """What n2p2 computed: its functions (sorted order) and per-atom G (and dG_i/dr_i)."""

    functions: dict[str, list[dict]] = field(default_factory=dict)  # element → metadata
    values: list[np.ndarray] = field(default_factory=list)  # per atom in file order, (F_e,)
    elements: list[str] = field(default_factory=list)  # per atom
    d_self: list[np.ndarray] = field(default_factory=list)  # per atom, (F_e, 3)
    #: (structure, atom i, atom j, r_ij = r_j − r_i + S·cell rounded to 1e-6) → dG_i/dr_j,
    #: (F_e, 3) in n2p2's order (only with ``neighbours``)
    d_pairs: dict[tuple, np.ndarray] = field(default_factory=dict)


def pair_key(structure: int, i: int, j: int, vector: np.ndarray) -> tuple:
    """The key of a pair in :attr:`N2p2SymmetryFunctions.d_pairs`."""
    return (structure, i, j, *(np.round(vector, 6) + 0.0).tolist())


def pop_pair(
    d_pairs: dict[tuple, np.ndarray], structure: int, i: int, j: int, vector: np.ndarray
) -> np.ndarray:
    """Remove and return the pair of :attr:`N2p2SymmetryFunctions.d_pairs` of atoms ``i``,
    ``j`` of ``structure`` whose r_ij is ``vector`` within 1e-5: where a component lies at a
    rounding boundary of :func:`pair_key` (…5e-7), n2p2's and our last bits round apart."""
    key = pair_key(structure, i, j, vector)
    if key in d_pairs:
        return d_pairs.pop(key)
    near = [
        k for k in d_pairs
        if k[:3] == key[:3] and np.abs(np.array(k[3:]) - vector).max() < 1e-5
    ]  # fmt: skip
    assert len(near) == 1, f"n2p2 has no pair {key} (or several near it: {near})"
    return d_pairs.pop(near[0])


def _function(words: list[str]) -> dict:
    """Metadata of one n2p2 settings line (n2p2's own units, as in input.nn)."""
    t = int(words[2])
    if t == 2:
        return {"type": 2, "neighbors": (words[3],), "eta": float(words[4]),
                "rs": float(words[5]), "rc": float(words[6])}  # fmt: skip
    nb = tuple(sorted(words[3:5]))
    eta, lam, zeta, rc, rs = (float(w) for w in words[5:10])
    return {"type": t, "neighbors": nb, "eta": eta, "lambda": lam, "zeta": zeta, "rc": rc, "rs": rs}


def run(
    exe: Path, workdir: Path, derivatives: bool, neighbours: bool = False
) -> N2p2SymmetryFunctions:
    """Run the dumper in ``workdir`` (holding input.nn and input.data) and parse its output;
    ``neighbours``: also every pair's dG_i/dr_j (:attr:`N2p2SymmetryFunctions.d_pairs`)."""
    proc = subprocess.run(
        [str(exe), "2" if neighbours else "1" if derivatives else "0"],
        cwd=workdir, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    out = N2p2SymmetryFunctions()
    current: list[dict] = []
    atoms: dict[tuple[int, int], str] = {}  # (structure, atom) → element
    pairs: list[list[str]] = []
    for line in proc.stdout.splitlines():
        w = line.split()
        if w[0] == "F":
            current = out.functions.setdefault(w[1], [])
        elif w[0] == "symfunction_short":
            current.append(_function(w))
        elif w[0] == "A":
            atoms[int(w[1]), int(w[2])] = w[3]
            out.elements.append(w[3])
            out.values.append(np.array(w[4:], dtype=np.float64))
        elif w[0] == "D":
            out.d_self.append(np.array(w[3:], dtype=np.float64).reshape(-1, 3))
        elif w[0] == "N":
            pairs.append(w)
    for w in pairs:  # n2p2 keeps, per neighbour, only the functions its element enters
        s, i, j = int(w[1]), int(w[2]), int(w[3])
        e, f = atoms[s, i], atoms[s, j]
        rows = [n for n, fn in enumerate(out.functions[e]) if f in fn["neighbors"]]
        full = np.zeros((len(out.functions[e]), 3))
        full[rows] = np.array(w[7:], dtype=np.float64).reshape(-1, 3)
        key = pair_key(s, i, j, -np.array(w[4:7], dtype=np.float64))  # n2p2's dr: r_i − r_j
        assert key not in out.d_pairs, f"two pairs {key}"
        out.d_pairs[key] = full
    return out


def column_map(ours: list[dict], theirs: list[dict]) -> list[int]:
    """For each n2p2 function, the index of the feature with the same metadata in ``ours``."""

    def same(a: dict, b: dict) -> bool:
        if a["type"] != b["type"] or tuple(sorted(a["neighbors"])) != b["neighbors"]:
            return False
        keys = ["eta", "rs", "rc"] + (["zeta", "lambda"] if a["type"] != 2 else [])
        return all(np.isclose(a[k], b[k], rtol=1e-7, atol=1e-12) for k in keys)

    cols = []
    for t in theirs:
        hits = [n for n, o in enumerate(ours) if same(o, t)]
        assert len(hits) == 1, f"n2p2 function {t} matches our features {hits}"
        cols.append(hits[0])
    assert sorted(cols) == list(range(len(ours))), "not a one-to-one mapping"
    return cols
