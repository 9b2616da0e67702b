"""n2p2's angular semantics for any real ζ, λ, η: numba kernel vs torch path vs NumPy loop.

n2p2 (SymFncExpAngn/Angw) accepts any real ζ (integer ζ of any sign by repeated
multiplication), any real λ and η, honours rs in angular terms, and drops a triplet term
(value and derivative) wherever 1 + λ cos θ ≤ 0. ``ACSF`` refuses ζ < 1, λ ≠ ±1 and η < 0
until input.nn parsing accepts them (issue 13), so these tests build the features with
the parameter check bypassed; the kernels under test are the real ones.
"""

from __future__ import annotations

import ase
import numpy as np
import pytest
import torch
from acsf_reference import reference
from acsf_unchecked import allow_any_parameters

from dparallel.descriptors import ACSF
from dparallel.descriptors._acsf_backends import numba_available

pytestmark = pytest.mark.skipif(not numba_available(), reason="numba not installed")

# (η, ζ, λ, rs): non-integer, zero and negative ζ, |λ| ≠ 1, negative η, rs > 0
NARROW = [
    (0.1, 0.5, 0.5, 0.3),
    (0.05, -2.0, 0.5, 0.0),
    (-0.02, 3.0, -2.0, 1.0),
    (0.2, 0.0, -1.0, 0.0),
]
WIDE = [(0.1, 2.5, -0.7, 0.4), (0.03, -1.0, 0.4, 0.0), (0.2, 1.0, -3.0, 0.5), (0.05, 1.0, 0.0, 0.0)]
RADIAL = [(-0.05, 0.5), (0.3, 1.0)]


@pytest.fixture
def unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let ACSF take any finite ζ, λ, η (the kernels must compute them as n2p2 does)."""
    allow_any_parameters(monkeypatch)


def _structures(seed: int) -> list[ase.Atoms]:
    rng = np.random.default_rng(seed)
    cell = np.diag(rng.uniform(3.6, 4.4, 3)) + rng.uniform(-0.4, 0.4, (3, 3)) * (1 - np.eye(3))
    bulk = ase.Atoms(
        numbers=rng.choice([29, 79], 7), scaled_positions=rng.random((7, 3)), cell=cell, pbc=True
    )
    cluster = ase.Atoms("Cu3Au2", positions=rng.normal(scale=1.3, size=(5, 3)))
    return [bulk, cluster]


def _acsf(cutoff: int) -> ACSF:
    return ACSF.uniform(
        ["Cu", "Au"],
        r_cut=4.2,
        cutoff=cutoff,
        alpha=0.0 if cutoff in (2, 3) else 0.2,
        radial=RADIAL,
        narrow=NARROW,
        wide=WIDE,
    )


@pytest.mark.parametrize("cutoff", [1, 2, 4, 6])
def test_any_zeta_lambda_eta_values(unchecked: None, cutoff: int) -> None:
    acsf = _acsf(cutoff)
    structs = _structures(cutoff)
    fast = acsf.compute(structs, backend="numba")
    ref = acsf.compute(structs, backend="torch")
    offsets = np.cumsum([0] + [len(a) for a in structs])
    for e, res in fast.items():
        np.testing.assert_allclose(res.values, ref[e].values, rtol=1e-12, atol=1e-300)
        feats = [dict(f, cutoff_id=cutoff) for f in acsf.features(e)]
        for row, atom in enumerate(res.atom_index.tolist()[:4]):  # the NumPy loop is slow
            s = int(np.searchsorted(offsets, atom, side="right") - 1)
            expect = reference(structs[s], feats, atom - int(offsets[s]))
            np.testing.assert_allclose(res.values[row], expect, rtol=1e-10, atol=1e-300)


@pytest.mark.parametrize("cutoff", [1, 6])
def test_any_zeta_lambda_eta_derivatives(unchecked: None, cutoff: int) -> None:
    acsf = _acsf(cutoff)
    structs = _structures(10 + cutoff)
    fast = acsf.compute(structs, derivatives=True, backend="numba")
    ref = acsf.compute(structs, derivatives=True, backend="torch")
    for e in fast:
        for f, pd in fast[e].pairs.items():
            np.testing.assert_allclose(pd.dG_dr, ref[e].pairs[f].dG_dr, rtol=1e-10, atol=1e-12)


def test_derivatives_match_finite_differences_with_dropped_terms(unchecked: None) -> None:
    """λ = -3 drops most triplets; ζ = -1, 2.5 are smooth where kept: FD must agree."""
    acsf = ACSF.uniform(
        ["Cu", "Au"],
        r_cut=4.0,
        cutoff="poly2",
        radial=[(-0.05, 0.5)],
        narrow=[(0.1, 2.5, 0.5, 0.3), (0.05, -1.0, 0.5, 0.0)],
        wide=[(0.1, 2.0, -3.0, 0.4), (-0.02, 3.0, 1.5, 0.0)],
    )
    atoms = _structures(3)[0]
    out = acsf.compute([atoms], derivatives=True, backend="numba")
    pos0 = torch.from_numpy(atoms.get_positions())
    h = 1e-6
    for e, res in out.items():
        n_feat = acsf.n_features(e)
        jac = np.zeros((res.values.shape[0], n_feat, len(atoms), 3))
        for pd in res.pairs.values():
            dg = np.zeros((pd.dG_dr.shape[0], n_feat, 3))
            dg[:, pd.feature_index.numpy()] = pd.dG_dr.numpy()
            np.add.at(jac, (pd.center.numpy(), slice(None), pd.pair_second.numpy()), dg)
            np.add.at(jac, (pd.center.numpy(), slice(None), pd.pair_first.numpy()), -dg)
        for k in range(len(atoms)):
            for d in range(3):
                vals = []
                for sign in (1.0, -1.0):
                    moved = atoms.copy()
                    p = pos0.clone()
                    p[k, d] += sign * h
                    moved.positions = p.numpy()
                    vals.append(acsf.compute([moved], backend="numba")[e].values.numpy())
                fd = (vals[0] - vals[1]) / (2 * h)
                np.testing.assert_allclose(jac[:, :, k, d], fd, rtol=1e-5, atol=1e-7)
