"""Analytic per-pair ACSF derivatives against autograd and finite differences; forces, virial."""

from __future__ import annotations

import ase
import numpy as np
import pytest
import torch
from acsf_unchecked import allow_any_parameters

from dparallel.descriptors import ACSF, forces_from_derivatives, virial_from_derivatives
from dparallel.neighbors import neighbor_list
from dparallel.types import StructureBatch


def _acsf(cutoff: str = "poly2", alpha: float = 0.1) -> ACSF:
    return ACSF.uniform(
        ["H", "O"],
        r_cut=3.5,
        cutoff=cutoff,
        alpha=alpha,
        radial=[(0.6, 0.0), (1.1, 1.3)],
        narrow=[(0.3, 1.0, -1.0, 0.0), (0.2, 2.0, 1.0, 0.8)],
        wide=[(0.1, 4.0, 1.0, 0.5), (0.5, 1.0, -1.0, 0.0)],
    )


def _cell(seed: int = 0) -> ase.Atoms:
    rng = np.random.default_rng(seed)
    cell = np.diag([3.0, 2.8, 3.3]) + 0.35 * (1 - np.eye(3))  # smaller than 2·rc: images
    return ase.Atoms("H3O2", scaled_positions=rng.random((5, 3)), cell=cell, pbc=True)


def _jacobian_from_pairs(res, n_feat: int, n_atoms: int) -> np.ndarray:
    """dG_i/dr_k (n_e, F, N, 3) assembled from the stored per-pair derivatives."""
    jac = np.zeros((res.values.shape[0], n_feat, n_atoms, 3))
    for pd in res.pairs.values():
        dg = np.zeros((pd.dG_dr.shape[0], n_feat, 3))
        dg[:, pd.feature_index.numpy()] = pd.dG_dr.numpy()
        c, j, i = pd.center.numpy(), pd.pair_second.numpy(), pd.pair_first.numpy()
        np.add.at(jac, (c, slice(None), j), dg)
        np.add.at(jac, (c, slice(None), i), -dg)
    return jac


def _acsf_n2p2_extremes() -> ACSF:
    """What n2p2 accepts: ζ < 1, ζ = 0, negative integer ζ, λ ≠ ±1, η < 0."""
    return ACSF.uniform(
        ["H", "O"],
        r_cut=3.5,
        cutoff="poly2",
        alpha=0.1,
        radial=[(-0.05, 1.0)],
        narrow=[(0.3, 0.5, 0.7, 0.0), (0.2, -2.0, 0.4, 0.8), (0.1, 2.0, 2.0, 0.0)],
        wide=[(-0.02, 0.0, 1.0, 0.5), (0.5, 3.0, -3.0, 0.0), (0.1, 2.5, -1.0, 0.0)],
    )


@pytest.mark.parametrize(
    "cutoff,alpha", [("poly2", 0.1), ("cos", 0.0), ("exp", 0.2), ("n2p2-extremes", 0.1)]
)
def test_pair_derivatives_equal_autograd_and_finite_differences(
    cutoff: str, alpha: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    allow_any_parameters(monkeypatch)  # n2p2's extremes: η < 0, λ ≠ ±1 (ACSF refuses them)
    atoms = _cell()
    acsf = _acsf_n2p2_extremes() if cutoff == "n2p2-extremes" else _acsf(cutoff, alpha)
    batch = StructureBatch.from_ase([atoms])
    out = acsf.compute(batch, derivatives=True)
    nl = neighbor_list(batch, acsf.r_cut + 0.1)  # reused for the displaced positions
    pos0 = torch.from_numpy(batch.positions)
    for e, res in out.items():
        F = acsf.n_features(e)
        jac = _jacobian_from_pairs(res, F, batch.n_atoms)

        def values(p: torch.Tensor, e: str = e) -> torch.Tensor:
            return acsf.compute(batch, positions=p, neighbors=nl)[e].values

        auto = torch.autograd.functional.jacobian(values, pos0).numpy()  # (n_e, F, N, 3)
        np.testing.assert_allclose(jac, auto, rtol=1e-9, atol=1e-11)
        h = 1e-5
        fd = np.zeros_like(jac)
        for k in range(batch.n_atoms):
            for d in range(3):
                dp = torch.zeros_like(pos0)
                dp[k, d] = h
                fd[:, :, k, d] = ((values(pos0 + dp) - values(pos0 - dp)) / (2 * h)).numpy()
        np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-8)


def test_layout_holds_only_touchable_features() -> None:
    acsf = _acsf()
    res = acsf.compute([_cell()], derivatives=True)["H"]
    feats = acsf.features("H")
    for f, pd in res.pairs.items():
        expect = [n for n, m in enumerate(feats) if f in m["neighbors"]]
        assert pd.feature_index.tolist() == expect
        assert pd.dG_dr.shape == (pd.pair_first.shape[0], len(expect), 3)
        assert (pd.pair_first.numpy() == res.atom_index.numpy()[pd.center.numpy()]).all()


def _linear_energy(acsf: ACSF, seed: int = 3) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    return {e: torch.from_numpy(rng.standard_normal(acsf.n_features(e))) for e in acsf.elements}


def test_forces_sum_to_zero_and_equal_finite_differences() -> None:
    atoms = _cell(1)
    acsf = _acsf()
    batch = StructureBatch.from_ase([atoms])
    w = _linear_energy(acsf)
    out = acsf.compute(batch, derivatives=True)
    dE_dG = {e: w[e].expand(r.values.shape[0], -1) for e, r in out.items()}
    forces = forces_from_derivatives(dE_dG, out, batch.n_atoms)
    np.testing.assert_allclose(forces.sum(0).numpy(), 0.0, atol=1e-12)

    nl = neighbor_list(batch, acsf.r_cut + 0.1)

    def energy(pos: np.ndarray) -> float:
        vals = acsf.compute(batch, positions=torch.from_numpy(pos), neighbors=nl)
        return float(sum((vals[e].values @ w[e]).sum() for e in vals))

    h, fd = 1e-5, np.zeros((batch.n_atoms, 3))
    for k in range(batch.n_atoms):
        for d in range(3):
            p, m = batch.positions.copy(), batch.positions.copy()
            p[k, d] += h
            m[k, d] -= h
            fd[k, d] = -(energy(p) - energy(m)) / (2 * h)
    np.testing.assert_allclose(forces.numpy(), fd, rtol=1e-6, atol=1e-8)


def test_virial_equals_strain_derivative() -> None:
    atoms = _cell(2)
    acsf = _acsf()
    w = _linear_energy(acsf)
    batch = StructureBatch.from_ase([atoms])
    out = acsf.compute(batch, derivatives=True)
    dE_dG = {e: w[e].expand(r.values.shape[0], -1) for e, r in out.items()}
    virial = virial_from_derivatives(dE_dG, out, torch.from_numpy(batch.structure_index), 1)[0]

    def energy(eps: np.ndarray) -> float:
        strained = atoms.copy()
        strained.set_cell(atoms.cell[:] @ (np.eye(3) + eps).T, scale_atoms=True)
        vals = acsf.compute([strained])
        return float(sum((vals[e].values @ w[e]).sum() for e in vals))

    h, fd = 1e-6, np.zeros((3, 3))
    for a in range(3):
        for b in range(3):
            eps = np.zeros((3, 3))
            eps[a, b] = h
            fd[a, b] = -(energy(eps) - energy(-eps)) / (2 * h)
    np.testing.assert_allclose(virial.numpy(), fd, rtol=1e-5, atol=1e-8)


def test_double_backward_through_compute_and_forces() -> None:
    atoms = ase.Atoms("OHH", positions=[[0, 0, 0], [0.96, 0.1, 0], [-0.24, 0.93, 0.05]])
    acsf = _acsf("cos", 0.0)
    batch = StructureBatch.from_ase([atoms])
    w = _linear_energy(acsf)

    def forces_norm(pos: torch.Tensor) -> torch.Tensor:
        vals = acsf.compute(batch, positions=pos)
        e = sum(torch.tanh(vals[k].values @ w[k]).sum() for k in vals)
        (g,) = torch.autograd.grad(e, pos, create_graph=True)
        return (g * g).sum()

    pos = torch.from_numpy(batch.positions.copy()).requires_grad_(True)
    assert torch.autograd.gradcheck(forces_norm, (pos,), eps=1e-6, atol=1e-6)
    # forces_from_derivatives is differentiable in dE/dG (training backprops through it)
    out = acsf.compute(batch, derivatives=True)
    g = {
        e: torch.randn(r.values.shape, dtype=torch.float64, requires_grad=True)
        for e, r in out.items()
    }
    assert torch.autograd.gradcheck(
        lambda a, b: forces_from_derivatives({"H": a, "O": b}, out, 3), (g["H"], g["O"])
    )


@pytest.mark.parametrize("cutoff", ["cos", "poly2", "exp", "tanh"])
def test_smooth_at_cutoff(cutoff: str) -> None:
    acsf = _acsf(cutoff, 0.0)
    rc = acsf.r_cut
    for r in (rc - 1e-4, rc + 1e-9):
        trimer = ase.Atoms("OHH", positions=[[0, 0, 0], [r, 0, 0], [0, 1.0, 0]])
        out = acsf.compute([trimer], derivatives=True)
        rows = out["O"].pairs["H"]
        far = (rows.vectors.norm(dim=1) > rc - 1e-3).nonzero().squeeze(1)
        if r > rc:
            assert far.numel() == 0
        else:
            assert rows.dG_dr[far].abs().max() < 1e-5
    near = acsf.compute([ase.Atoms("OH", positions=[[0, 0, 0], [rc - 1e-4, 0, 0]])])
    assert near["O"].values.abs().max() < 1e-6


def test_float32_matches_float64() -> None:
    acsf = _acsf()
    a = acsf.compute([_cell()], derivatives=True, dtype=torch.float64)
    b = acsf.compute([_cell()], derivatives=True, dtype=torch.float32)
    for e in a:
        np.testing.assert_allclose(b[e].values.numpy(), a[e].values.numpy(), rtol=1e-4, atol=1e-5)
        for f in a[e].pairs:
            np.testing.assert_allclose(
                b[e].pairs[f].dG_dr.numpy(), a[e].pairs[f].dG_dr.numpy(), rtol=1e-3, atol=1e-4
            )


def test_numpy_roundtrip_gives_same_forces() -> None:
    from dparallel.descriptors import DescriptorResult

    acsf = _acsf()
    batch = StructureBatch.from_ase([_cell(4)])
    out = acsf.compute(batch, derivatives=True)
    flat = {e: r.to_numpy() for e, r in out.items()}
    assert all(isinstance(a, np.ndarray) for d in flat.values() for a in d.values())
    back = {e: DescriptorResult.from_numpy(d) for e, d in flat.items()}
    w = _linear_energy(acsf)
    dE_dG = {e: w[e].expand(r.values.shape[0], -1) for e, r in out.items()}
    np.testing.assert_array_equal(
        forces_from_derivatives(dE_dG, back, batch.n_atoms).numpy(),
        forces_from_derivatives(dE_dG, out, batch.n_atoms).numpy(),
    )


def test_interleaved_feature_order_derivatives_match_autograd() -> None:
    base = _acsf()
    rng = np.random.default_rng(7)
    feats = {e: [base.features(e)[n] for n in rng.permutation(base.n_features(e))] for e in "HO"}
    acsf = ACSF(["H", "O"], feats)  # radial and angular columns interleaved
    batch = StructureBatch.from_ase([_cell(5)])
    out = acsf.compute(batch, derivatives=True)
    pos0 = torch.from_numpy(batch.positions)
    for e, res in out.items():
        jac = _jacobian_from_pairs(res, acsf.n_features(e), batch.n_atoms)
        auto = torch.autograd.functional.jacobian(
            lambda p, e=e: acsf.compute(batch, positions=p)[e].values, pos0
        ).numpy()
        np.testing.assert_allclose(jac, auto, rtol=1e-9, atol=1e-11)
