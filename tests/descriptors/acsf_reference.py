"""Independent NumPy loop reference of n2p2 symmetry functions (tests only)."""

from __future__ import annotations

import math

import ase
import numpy as np
from ase.neighborlist import neighbor_list


def fc(r: float, rc: float, kind: int, alpha: float) -> float:
    """n2p2 cutoff function, scalar."""
    if r >= rc:
        return 0.0
    if kind in (2, 3):
        v = math.tanh(1 - r / rc) ** 3
        return v / math.tanh(1.0) ** 3 if kind == 3 else v
    rci = alpha * rc
    if r < rci:
        return 1.0
    x = (r - rci) / (rc - rci)
    if kind == 0:
        return 1.0
    if kind == 1:
        return 0.5 * (math.cos(math.pi * x) + 1)
    if kind == 4:
        return math.exp(1 - 1 / (1 - x * x))
    if kind == 5:
        return (2 * x - 3) * x * x + 1
    if kind == 6:
        return ((15 - 6 * x) * x - 10) * x**3 + 1
    if kind == 7:
        return (x * (x * (20 * x - 70) + 84) - 35) * x**4 + 1
    return (x * (x * ((315 - 70 * x) * x - 540) + 420) - 126) * x**5 + 1


def reference(atoms: ase.Atoms, features: list[dict], center: int) -> np.ndarray:
    """Every feature of atom ``center`` by explicit loops over neighbours and pairs j<k."""
    rmax = max(f["rc"] for f in features)
    i, j, D = neighbor_list("ijD", atoms, rmax + 1e-9)
    sel = i == center
    js, vs = j[sel], D[sel]
    sym = atoms.get_chemical_symbols()
    out = np.zeros(len(features))
    for n, f in enumerate(features):
        kind, rc, al, eta, rs = f["cutoff_id"], f["rc"], f["alpha"], f["eta"], f["rs"]
        total = 0.0
        if f["type"] == 2:
            for jj, v in zip(js, vs, strict=False):
                r = np.linalg.norm(v)
                if sym[jj] == f["neighbors"][0]:
                    total += math.exp(-eta * (r - rs) ** 2) * fc(r, rc, kind, al)
        else:
            zeta, lam = f["zeta"], f["lambda"]
            want = sorted(f["neighbors"])
            for a in range(len(js)):
                for b in range(a + 1, len(js)):
                    if sorted([sym[js[a]], sym[js[b]]]) != want:
                        continue
                    va, vb = vs[a], vs[b]
                    ra, rb = np.linalg.norm(va), np.linalg.norm(vb)
                    rab = np.linalg.norm(vb - va)
                    cos = float(va @ vb) / (ra * rb)
                    base = 1 + lam * cos
                    if base <= 0:  # n2p2: no contribution (any ζ, λ)
                        continue
                    term = 2 ** (1 - zeta) * base**zeta
                    term *= math.exp(-eta * ((ra - rs) ** 2 + (rb - rs) ** 2))
                    term *= fc(ra, rc, kind, al) * fc(rb, rc, kind, al)
                    if f["type"] == 3:
                        term *= math.exp(-eta * (rab - rs) ** 2) * fc(rab, rc, kind, al)
                    total += term
        out[n] = total
    return out
