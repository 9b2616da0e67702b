"""Every symmetry-function value (and dG_i/dr_i) against n2p2 itself (libnnp, float64).

n2p2 sorts each element's functions internally, so columns are mapped by metadata
(type, elements, η, rs, ζ, λ, rc). Skipped when n2p2 is not built (../shared/n2p2/build.sh).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ase.build
import n2p2_dump
import numpy as np
import pytest
from acsf_unchecked import allow_any_parameters

from dparallel.descriptors._acsf_backends import numba_available
from dparallel.io import open_source
from dparallel.n2p2 import acsf_from_input_nn

if TYPE_CHECKING:
    from pathlib import Path

    from dparallel.descriptors import ACSF

_why = n2p2_dump.unavailable()
pytestmark = [
    pytest.mark.skipif(_why is not None, reason=_why or ""),
    pytest.mark.skipif(not numba_available(), reason="numba not installed"),
    pytest.mark.integration,
]


@pytest.fixture(scope="module")
def dumper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return n2p2_dump.build(tmp_path_factory.mktemp("n2p2_dump"))


def _compare(acsf: ACSF, workdir: Path, exe: Path, derivatives: bool) -> int:
    """Our values (and -Σ_j dG_i/dr_ij) against n2p2's for every atom; returns atoms checked."""
    theirs = n2p2_dump.run(exe, workdir, derivatives)
    source = open_source(workdir / "input.data", "n2p2", cache_index=False)
    batch = source.read(0, len(source))
    out = acsf.compute(batch, derivatives=derivatives)
    cols = {e: n2p2_dump.column_map(acsf.features(e), fs) for e, fs in theirs.functions.items()}
    assert len(theirs.values) == batch.n_atoms
    for e, res in out.items():
        for row, atom in enumerate(res.atom_index.tolist()):
            assert theirs.elements[atom] == e
            np.testing.assert_allclose(
                res.values[row, cols[e]].numpy(), theirs.values[atom], rtol=1e-10, atol=1e-300
            )
        if not derivatives:
            continue
        d_self = np.zeros((res.values.shape[0], acsf.n_features(e), 3))
        for pd in res.pairs.values():
            dg = np.zeros((pd.dG_dr.shape[0], acsf.n_features(e), 3))
            dg[:, pd.feature_index.numpy()] = pd.dG_dr.numpy()
            np.add.at(d_self, pd.center.numpy(), -dg)  # dG_i/dr_i = -Σ_j dG_i/dr_ij
        for row, atom in enumerate(res.atom_index.tolist()):
            ref = theirs.d_self[atom]
            # floor: a lone atom in a narrow cell has dG_i/dr_i = 0 up to rounding (1e-16)
            scale = max(np.abs(ref).max(), 0.1)
            np.testing.assert_allclose(d_self[row, cols[e]], ref, rtol=1e-8, atol=1e-11 * scale)
    return batch.n_atoms


def test_water_example_equals_n2p2(dumper: Path, water: Path, tmp_path: Path) -> None:
    """n2p2's RPBE-D3 water example (types 2 and 3, tanhu cutoff), file units (bohr)."""
    lines = (water / "input.data").read_text().splitlines(keepends=True)
    ends = [n for n, line in enumerate(lines) if line.split()[:1] == ["end"]]
    (tmp_path / "input.data").write_text("".join(lines[: ends[1] + 1]))  # two structures
    (tmp_path / "input.nn").write_text((water / "input.nn").read_text())
    acsf = acsf_from_input_nn(str(tmp_path / "input.nn"))
    assert _compare(acsf, tmp_path, dumper, derivatives=True) > 100


def _metal_input_nn(cutoff: int, alpha: float, angular: list[tuple]) -> str:
    """input.nn for Cu/Au with types 2, 3 and 9 on every element (pair)."""
    lines = ["number_of_elements 2", "elements Cu Au", f"cutoff_type {cutoff} {alpha}"]
    for ec in ("Cu", "Au"):
        for e1 in ("Cu", "Au"):
            for eta, rs in ((0.0, 0.0), (0.4, 2.5), (1.5, 3.2)):
                lines.append(f"symfunction_short {ec} 2 {e1} {eta} {rs} 5.2")
        for e1, e2 in (("Cu", "Cu"), ("Cu", "Au"), ("Au", "Au")):
            for t, eta, lam, zeta, rs in angular:
                lines.append(f"symfunction_short {ec} {t} {e1} {e2} {eta} {lam} {zeta} 5.2 {rs}")
    return "\n".join(lines) + "\n"


def _cu_au(seed: int) -> list[ase.Atoms]:
    """Rattled fcc CuAu cells larger than 2·rc (no self-images) and one cluster."""
    rng = np.random.default_rng(seed)
    out = []
    for n, a in ((3, 3.75), (3, 3.9)):
        atoms = ase.build.bulk("Cu", "fcc", a=a, cubic=True) * (n, n, n)
        atoms.numbers[rng.random(len(atoms)) < 0.4] = 79
        atoms.rattle(0.15, seed=int(rng.integers(1 << 30)))
        out.append(atoms)
    cluster = ase.Atoms("Cu6Au4", positions=rng.normal(scale=1.8, size=(10, 3)))
    cluster.pbc = False
    return [*out, cluster]


STANDARD = [
    (3, 0.01, 1.0, 1.0, 0.0), (3, 0.05, -1.0, 2.0, 0.0), (3, 0.1, 1.0, 4.0, 1.5),
    (9, 0.01, 1.0, 1.0, 0.0), (9, 0.05, -1.0, 2.0, 0.8), (9, 0.02, 1.0, 16.0, 0.0),
]  # fmt: skip


@pytest.mark.parametrize("cutoff,alpha", [(1, 0.0), (2, 0.0), (3, 0.0), (4, 0.1), (6, 0.2)])
def test_metal_types_2_3_9_equal_n2p2(
    dumper: Path, tmp_path: Path, cutoff: int, alpha: float
) -> None:
    (tmp_path / "input.nn").write_text(_metal_input_nn(cutoff, alpha, STANDARD))
    n2p2_dump.write_input_data(tmp_path / "input.data", _cu_au(cutoff))
    acsf = acsf_from_input_nn(str(tmp_path / "input.nn"))
    assert _compare(acsf, tmp_path, dumper, derivatives=True) > 200


EXOTIC = [
    (3, 0.1, 0.5, 0.5, 0.3), (3, 0.05, 0.5, -2.0, 0.0), (3, -0.01, -2.0, 3.0, 1.0),
    (9, 0.1, -0.7, 2.5, 0.4), (9, 0.03, 0.4, -1.0, 0.0), (9, 0.2, -3.0, 1.0, 0.5),
]  # fmt: skip


def test_any_zeta_lambda_eta_equal_n2p2(
    dumper: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ζ < 1, negative integer ζ, |λ| ≠ 1, η < 0, rs > 0 (n2p2 accepts all of them)."""
    allow_any_parameters(monkeypatch)
    (tmp_path / "input.nn").write_text(_metal_input_nn(6, 0.0, EXOTIC))
    n2p2_dump.write_input_data(tmp_path / "input.data", _cu_au(7))
    acsf = acsf_from_input_nn(str(tmp_path / "input.nn"))
    assert _compare(acsf, tmp_path, dumper, derivatives=True) > 200


SHIFTED = [(3, 0.1, 1.0, 1.0, 5.2), (3, 0.2, -1.0, 2.0, 6.5), (9, 0.1, 1.0, 2.0, 5.2),
           (9, 0.3, -1.0, 1.0, 7.0)]  # fmt: skip


@pytest.mark.parametrize("cutoff,alpha", [(1, 0.0), (8, 0.1)])
def test_shift_at_or_beyond_the_cutoff_equals_n2p2(
    dumper: Path, tmp_path: Path, cutoff: int, alpha: float
) -> None:
    """rs = rc and rs > rc (n2p2 computes them: the Gaussian's tail inside rc, not 0)."""
    text = _metal_input_nn(cutoff, alpha, SHIFTED)
    text += "".join(f"symfunction_short {c} 2 Au 0.3 {rs} 5.2\n" for c in ("Cu", "Au")
                    for rs in (5.2, 6.0, 9.0))  # fmt: skip
    (tmp_path / "input.nn").write_text(text)
    n2p2_dump.write_input_data(tmp_path / "input.data", _cu_au(20 + cutoff))
    acsf = acsf_from_input_nn(str(tmp_path / "input.nn"))
    assert _compare(acsf, tmp_path, dumper, derivatives=True) > 200


def _pair_derivatives(acsf: ACSF, workdir: Path, exe: Path) -> int:
    """Every pair's ∂G_i/∂r_ij against n2p2's dG_i/dr_j (each neighbour image on its own);
    returns the pairs compared."""
    theirs = n2p2_dump.run(exe, workdir, derivatives=True, neighbours=True)
    source = open_source(workdir / "input.data", "n2p2", cache_index=False)
    batch = source.read(0, len(source))
    starts = batch.offsets
    ours, ref = [], []
    for e, res in acsf.compute(batch, derivatives=True).items():
        cols = n2p2_dump.column_map(acsf.features(e), theirs.functions[e])
        for pd in res.pairs.values():
            full = np.zeros((pd.dG_dr.shape[0], acsf.n_features(e), 3))
            full[:, pd.feature_index.numpy()] = pd.dG_dr.numpy()
            first, second = pd.pair_first.numpy(), pd.pair_second.numpy()
            s = np.searchsorted(starts, first, side="right") - 1
            for p, vector in enumerate(pd.vectors.numpy()):
                i, j = first[p] - starts[s[p]], second[p] - starts[s[p]]
                ours.append(full[p, cols])
                ref.append(n2p2_dump.pop_pair(theirs.d_pairs, s[p], i, j, vector))  # n2p2's
    assert not theirs.d_pairs, f"pairs only n2p2 lists: {list(theirs.d_pairs)[:3]}"
    for a, b in zip(ours, ref, strict=True):
        scale = max(np.abs(b).max(), 1e-3)
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10 * scale)
    return len(ours)


EDGE = [
    (3, 0.0, 1.0, 0.5, 0.0), (3, 0.05, -1.0, 64.0, 0.0), (3, 0.1, 1.0, 2.0, 6.0),
    (9, 0.0, -1.0, 1.0, 0.0), (9, 0.02, 1.0, 0.5, 5.2), (9, 0.01, 1.0, 3.0, 0.0),
]  # fmt: skip


@pytest.mark.parametrize("cutoff,alpha", [(3, 0.3), (7, 0.1)])
def test_every_pair_derivative_equals_n2p2(
    dumper: Path, tmp_path: Path, cutoff: int, alpha: float
) -> None:
    """dG_i/dr_j of every pair, not only their sum: ζ = 0.5 and 64, η = 0, λ = ±1, rs at and
    beyond rc; poly3 with α, and tanh, whose α n2p2 ignores."""
    (tmp_path / "input.nn").write_text(_metal_input_nn(cutoff, alpha, EDGE))
    n2p2_dump.write_input_data(tmp_path / "input.data", _cu_au(30 + cutoff))
    acsf = acsf_from_input_nn(str(tmp_path / "input.nn"))
    assert _pair_derivatives(acsf, tmp_path, dumper) > 5000


def _edge_structures(seed: int) -> list[ase.Atoms]:
    """Cells narrower than the cutoff (strongly triclinic; one atom; atoms several cells
    outside), a cluster with an atom far from it, a lone atom, a pair out of reach of each
    other, a molecule in a 200 Å box; some without Au or without Cu."""
    rng = np.random.default_rng(seed)
    skewed = [[3.9, 0.0, 0.0], [3.4, 1.6, 0.0], [2.9, 0.9, 1.8]]
    return [
        ase.Atoms("CuAuCu", scaled_positions=rng.random((3, 3)), cell=skewed, pbc=True),
        ase.Atoms("Cu", positions=[[0.2, 0.1, 0.0]],
                  cell=[[2.4, 0.0, 0.0], [0.4, 2.5, 0.0], [0.3, 0.2, 2.6]], pbc=True),
        ase.Atoms("Au2", scaled_positions=rng.uniform(-2, 3, (2, 3)),
                  cell=[[2.7, 0.0, 0.0], [-1.2, 2.5, 0.0], [0.9, -0.8, 2.6]], pbc=True),
        ase.Atoms("Cu3Au", positions=[[0, 0, 0], [2.4, 0, 0], [1.1, 2.0, 0.3], [30, 30, 30]]),
        ase.Atoms("Au", positions=[[1.0, 1.0, 1.0]]),
        ase.Atoms("CuAu", positions=[[0, 0, 0], [20, 0, 0]], cell=np.eye(3) * 60, pbc=True),
        ase.Atoms("CuAu", positions=[[0, 0, 0], [2.3, 0.4, 0.1]], cell=np.eye(3) * 200, pbc=True),
    ]  # fmt: skip


@pytest.mark.parametrize("cutoff,alpha", [(0, 0.0), (1, 0.3), (2, 0.0), (5, 0.1), (8, 0.2)])
def test_narrow_cells_lone_atoms_and_vacuum_equal_n2p2(
    dumper: Path, tmp_path: Path, cutoff: int, alpha: float
) -> None:
    """Values, and n2p2's dG_i/dr_i = −Σ_j ∂G_i/∂r_ij over every pair, an atom's pairs
    with its own images included: in cells narrower than the cutoff that is not the
    derivative of G_i when the atom moves with its images (first cell, cos cutoff: n2p2's
    central differences of its own values, up to 7.0, differ from it by 5.9 and from ours
    by 5e-8; test_acsf_values.py checks ours against DScribe's), but it checks every
    per-pair term."""
    (tmp_path / "input.nn").write_text(_metal_input_nn(cutoff, alpha, STANDARD))
    n2p2_dump.write_input_data(tmp_path / "input.data", _edge_structures(cutoff))
    acsf = acsf_from_input_nn(str(tmp_path / "input.nn"))
    assert _compare(acsf, tmp_path, dumper, derivatives=True) == 15


def _alloy_input_nn() -> str:
    """An input.nn of the size users bring: 4 elements, 192 functions per element (8 G2 per
    neighbour element, 8 G3 and 8 G9 per element pair, λ = ±1, ζ 1/2/4/8), poly2 cutoff 6.5 Å."""
    els = ["Cu", "Ag", "Au", "Ni"]
    lines = ["number_of_elements 4", "elements " + " ".join(els), "cutoff_type 6 0.0"]
    pairs = [(a, b) for n, a in enumerate(els) for b in els[n:]]
    radial = [(0.001, 0), (0.01, 0), (0.03, 0), (0.06, 0), (0.15, 2.5), (0.3, 3.0),
              (0.6, 3.6), (1.5, 4.2)]  # fmt: skip
    angular = [(eta, lam, zeta) for eta in (0.001, 0.01) for zeta in (1, 4) for lam in (1, -1)]
    for ec in els:
        lines += [f"symfunction_short {ec} 2 {e} {eta} {rs} 6.5" for e in els for eta, rs in radial]
        for e1, e2 in pairs:
            for eta, lam, zeta in angular:
                lines.append(f"symfunction_short {ec} 3 {e1} {e2} {eta} {lam} {zeta} 6.5 0.0")
                lines.append(f"symfunction_short {ec} 9 {e1} {e2} {eta} {lam} {2 * zeta} 6.5 0.0")
    return "\n".join(lines) + "\n"


def _alloy(n: int) -> list[ase.Atoms]:
    """Dense random 4-element fcc cells (108 atoms, ~82 neighbours within 6.5 Å)."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        atoms = ase.build.bulk("Cu", "fcc", a=3.6 + 0.4 * rng.random(), cubic=True) * (3, 3, 3)
        atoms.symbols = list(rng.choice(["Cu", "Ag", "Au", "Ni"], len(atoms)))
        atoms.rattle(0.1, seed=int(rng.integers(1 << 30)))
        atoms.positions = np.round(atoms.positions, 8)  # as an extxyz file stores them
        out.append(atoms)
    return out


def test_four_elements_of_192_functions_equal_n2p2(dumper: Path, tmp_path: Path) -> None:
    """Values, dG_i/dr_i and every pair's dG_i/dr_j of a 4-element input.nn with types 2,
    3 and 9 over every element (pair), in n2p2's column order: 216 atoms, 17,248 pairs (a
    component of one pair lies at pair_key's rounding boundary: pop_pair)."""
    (tmp_path / "input.nn").write_text(_alloy_input_nn())
    n2p2_dump.write_input_data(tmp_path / "input.data", _alloy(2))
    acsf = acsf_from_input_nn(str(tmp_path / "input.nn"))
    assert {e: acsf.n_features(e) for e in acsf.elements} == dict.fromkeys(acsf.elements, 192)
    theirs = n2p2_dump.run(dumper, tmp_path, derivatives=False)
    for e in acsf.elements:  # our columns in n2p2's sorted order (its scaling.data, weights)
        assert n2p2_dump.column_map(acsf.features(e), theirs.functions[e]) == list(range(192))
    assert _compare(acsf, tmp_path, dumper, derivatives=True) == 216
    assert _pair_derivatives(acsf, tmp_path, dumper) > 15_000
