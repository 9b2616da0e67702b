"""NeighborSum descriptor: hippynn sensitivities, hand values, derivatives, invariances."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ase import Atoms
from ase.neighborlist import neighbor_list as ase_neighbor_list

from dparallel.descriptors import NeighborSum
from dparallel.errors import DescriptorError

WATER = Atoms("OHH", positions=[(0.0, 0.0, 0.0), (0.9572, 0.0, 0.0), (-0.2399872, 0.9266272, 0.0)])


def _periodic(rng: np.random.Generator) -> Atoms:
    """Small triclinic cell, r_cut > cell length: repeated (i, j) pairs via images."""
    cell = np.array([[3.1, 0.0, 0.0], [0.4, 2.9, 0.0], [0.3, -0.2, 3.3]])
    frac = rng.random((5, 3))
    return Atoms("HHOOC", scaled_positions=frac, cell=cell, pbc=True)


def _ase_pairs(atoms: Atoms, cutoff: float):
    i, j, d = ase_neighbor_list("ijD", atoms, cutoff)
    return i.astype(np.int64), j.astype(np.int64), d


@pytest.mark.parametrize("kind", ["inverse", "gaussian"])
def test_values_by_hand_on_water(kind: str) -> None:
    desc = NeighborSum(["H", "O"], r_cut=6.0, n_sensitivities=5, r_min=0.7, kind=kind)
    res = desc.compute(WATER, neighbors=_ase_pairs(WATER, 6.0))
    mu, sigma, rc = desc.mu.numpy(), desc.sigma, 6.0

    def s(r: float) -> np.ndarray:
        base = (
            np.exp(-0.5 * sigma**2 * (1 / r - 1 / mu) ** 2)
            if kind == "inverse"
            else np.exp(-0.5 * (r - mu) ** 2 / sigma**2)
        )
        return base * np.cos(np.pi * r / (2 * rc)) ** 2

    r = lambda a, b: float(np.linalg.norm(WATER.positions[a] - WATER.positions[b]))  # noqa: E731
    g_o = np.zeros((5, 2))
    g_o[:, 0] = s(r(0, 1)) + s(r(0, 2))  # column k = ν·S + f, H is f = 0
    np.testing.assert_allclose(res["O"].values[0], g_o.ravel(), rtol=1e-12)
    g_h1 = np.stack([s(r(1, 2)), s(r(1, 0))], axis=1)
    np.testing.assert_allclose(res["H"].values[0], g_h1.ravel(), rtol=1e-12)
    np.testing.assert_array_equal(res["H"].atom_index, [1, 2])


@pytest.mark.parametrize("module", ["InverseSensitivityModule", "GaussianSensitivityModule"])
def test_inverse_sensitivities_match_hippynn(module: str) -> None:
    """hippynn's (n_dist, min_dist_soft, max_dist_soft, hard_max_dist) are (n_sensitivities,
    r_min, r_max, r_cut); its GaussianSensitivityModule is the same inverse-distance formula
    (docs/kernels.md), so both are kind="inverse"; r at the hard cutoff included."""
    sens = pytest.importorskip("hippynn.layers.hiplayers.sensitivity")
    desc = NeighborSum(["H"], r_cut=6.5, n_sensitivities=12, r_min=0.85, r_max=5.0)
    theirs = getattr(sens, module)(12, 0.85, 5.0, 6.5).double()
    # same initial centres and widths (hippynn builds them in float32)
    torch.testing.assert_close(theirs.mu[0], desc.mu, rtol=1e-6, atol=0)
    assert theirs.sigma[0, 0].item() == pytest.approx(desc.sigma)
    theirs.mu.data = desc.mu.unsqueeze(0).clone()
    theirs.sigma.data.fill_(desc.sigma)
    r = torch.cat([torch.linspace(0.9, 7.0, 200, dtype=torch.float64), torch.tensor([6.5])])
    with torch.no_grad():
        expected = theirs(r, warn_low_distances=False)
    ours, _ = desc.sensitivities(r)
    torch.testing.assert_close(ours, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", ["inverse", "gaussian"])
def test_pair_derivatives_match_autograd(kind: str, rng: np.random.Generator) -> None:
    atoms = _periodic(rng)
    desc = NeighborSum(["H", "C", "O"], r_cut=4.0, n_sensitivities=4, r_min=0.8, kind=kind)
    pf, ps, vec = _ase_pairs(atoms, 4.0)
    assert len(set(zip(pf.tolist(), ps.tolist(), strict=True))) < len(pf)  # duplicates exist
    res = desc.compute(atoms, derivatives=True, neighbors=(pf, ps, vec))
    species = torch.as_tensor([desc.elements.index(s) for s in atoms.get_chemical_symbols()])
    v = torch.as_tensor(vec).requires_grad_()
    jac = torch.autograd.functional.jacobian(
        lambda x: desc(species, torch.as_tensor(pf), torch.as_tensor(ps), x), v
    )  # (N, F, P, 3)
    # sum both sides over repeated (i, j) keys (periodic images), then compare per key
    n_atoms, n_feat = len(atoms), desc.n_features
    ours = np.zeros((n_atoms, n_atoms, n_feat, 3))
    for e in res.values():
        for block in e.pairs.values():
            first, second = block.pair_first.numpy(), block.pair_second.numpy()
            for k in range(len(first)):
                ours[first[k], second[k], block.feature_index.numpy()] += block.dG_dr[k].numpy()
    theirs = np.zeros_like(ours)
    for p in range(len(pf)):
        theirs[pf[p], ps[p]] += jac[pf[p], :, p].numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    # and each pair only touches its own centre's row of G
    assert int(torch.count_nonzero(jac.sum(dim=3))) <= len(pf) * desc.n_sensitivities


def _energy_and_forces(desc: NeighborSum, atoms: Atoms, w: dict[str, np.ndarray]):
    """E = Σ_i w_e · G_i and F_k = −∂E/∂r_k assembled from the pair derivative blocks."""
    res = desc.compute(atoms, derivatives=True, neighbors=_ase_pairs(atoms, desc.r_cut))
    energy = sum(float((e.values.numpy() @ w[s]).sum()) for s, e in res.items())
    forces = np.zeros((len(atoms), 3))
    for s, e in res.items():
        for block in e.pairs.values():
            fi = block.feature_index.numpy()
            de_dr = np.einsum("pfx,f->px", block.dG_dr.numpy(), w[s][fi])  # (P_ef, 3)
            np.add.at(forces, block.pair_second.numpy(), -de_dr)  # r_ij = r_j − r_i
            np.add.at(forces, block.pair_first.numpy(), de_dr)
    return energy, forces


def _hippynn_energy_and_forces(module, desc: NeighborSum, atoms: Atoms, w: dict):  # noqa: ANN001, ANN202
    """E = Σ_i w_e · G_i with G from hippynn (its sensitivity module, its envsum, one-hot
    species, ASE's pairs); forces by autograd through it."""
    env_pytorch = pytest.importorskip("hippynn.custom_kernels.env_pytorch")
    i, j, shifts = ase_neighbor_list("ijS", atoms, desc.r_cut)
    first, second = torch.as_tensor(i, dtype=torch.int64), torch.as_tensor(j, dtype=torch.int64)
    positions = torch.tensor(atoms.positions, requires_grad=True)
    cell = torch.as_tensor(np.asarray(atoms.cell[:]))
    vectors = (
        positions[second] - positions[first] + torch.as_tensor(shifts, dtype=cell.dtype) @ cell
    )
    sense = module(vectors.norm(dim=1), warn_low_distances=False)
    species = [desc.elements.index(s) for s in atoms.get_chemical_symbols()]
    onehot = torch.nn.functional.one_hot(torch.as_tensor(species), len(desc.elements)).double()
    env = env_pytorch.envsum(sense, onehot, first, second)  # (N, ν, S): column ν·S + f
    weights = torch.as_tensor(np.stack([w[desc.elements[k]] for k in species]))
    energy = (env.reshape(len(atoms), -1) * weights).sum()
    if not energy.requires_grad:  # no pair at all
        return energy.item(), np.zeros((len(atoms), 3))
    return energy.item(), -torch.autograd.grad(energy, positions)[0].numpy()


def test_structures_match_hippynns_interaction_input(rng: np.random.Generator) -> None:
    """Small triclinic cell (self-images), mixed pbc, zero cells, lone atoms, vacuum,
    unwrapped positions: energies Σ w·G and forces equal hippynn's, with dparallel's own
    neighbour list; lone atoms get zero features, nothing NaN."""
    sens = pytest.importorskip("hippynn.layers.hiplayers.sensitivity")
    from edge_structures import edge_structures

    desc = NeighborSum(["H", "O", "Cu"], r_cut=4.5, n_sensitivities=6, r_min=0.7, r_max=4.0)
    module = sens.InverseSensitivityModule(6, 0.7, 4.0, 4.5).double()
    module.mu.data = desc.mu.unsqueeze(0).clone()
    module.sigma.data.fill_(desc.sigma)
    w = {s: rng.normal(size=desc.n_features) for s in desc.elements}
    periodic = _periodic(rng)
    periodic.numbers[periodic.numbers == 6] = 29  # C → Cu
    for atoms in [periodic, *edge_structures(rng)]:
        energy, forces = 0.0, np.zeros((len(atoms), 3))
        for s, res in desc.compute(atoms, derivatives=True).items():
            energy += float((res.values.numpy() @ w[s]).sum())
            for block in res.pairs.values():
                de_dr = np.einsum("pfx,f->px", block.dG_dr.numpy(), w[s][block.feature_index])
                np.add.at(forces, block.pair_second.numpy(), -de_dr)  # r_ij = r_j − r_i
                np.add.at(forces, block.pair_first.numpy(), de_dr)
        ref_energy, ref_forces = _hippynn_energy_and_forces(module, desc, atoms, w)
        assert energy == pytest.approx(ref_energy, rel=1e-12, abs=1e-12)
        assert np.isfinite(forces).all()
        np.testing.assert_allclose(forces, ref_forces, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["inverse", "gaussian"])
def test_forces_match_finite_differences(kind: str, rng: np.random.Generator) -> None:
    atoms = _periodic(rng)
    desc = NeighborSum(["H", "C", "O"], r_cut=4.0, n_sensitivities=4, r_min=0.8, kind=kind)
    w = {s: rng.normal(size=desc.n_features) for s in desc.elements}
    _, forces = _energy_and_forces(desc, atoms, w)
    assert np.abs(forces.sum(0)).max() < 1e-10  # translation invariance: Σ F = 0
    h = 1e-5
    for k in range(len(atoms)):
        for x in range(3):
            plus, minus = atoms.copy(), atoms.copy()
            plus.positions[k, x] += h
            minus.positions[k, x] -= h
            fd = -(_energy_and_forces(desc, plus, w)[0] - _energy_and_forces(desc, minus, w)[0])
            assert forces[k, x] == pytest.approx(fd / (2 * h), rel=1e-6, abs=1e-7)


def test_rotation_and_permutation_invariance(rng: np.random.Generator) -> None:
    atoms = Atoms("CHHHO", positions=rng.normal(size=(5, 3)) * 1.2)
    desc = NeighborSum(["H", "C", "O"], r_cut=5.0, n_sensitivities=6, r_min=0.5)
    ref = desc.compute(atoms)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    rotated = atoms.copy()
    rotated.positions = atoms.positions @ q.T + np.array([0.3, -1.0, 2.0])
    rot = desc.compute(rotated)
    perm = rng.permutation(len(atoms))
    permuted = atoms[perm]
    per = desc.compute(permuted)
    for s in ref:
        np.testing.assert_allclose(rot[s].values, ref[s].values, rtol=1e-10, atol=1e-12)
        order = np.argsort(perm[per[s].atom_index])  # back to the original atom order
        np.testing.assert_allclose(per[s].values[order], ref[s].values, rtol=1e-12)


def test_default_neighbors_equal_explicit(rng: np.random.Generator) -> None:
    atoms = _periodic(rng)
    desc = NeighborSum(["H", "C", "O"], r_cut=4.0, n_sensitivities=3)
    a = desc.compute(atoms)
    b = desc.compute(atoms, neighbors=_ase_pairs(atoms, 4.0))
    for s in a:
        np.testing.assert_allclose(a[s].values, b[s].values, rtol=1e-12)


def test_metadata_and_round_trip() -> None:
    desc = NeighborSum([1, "O"], r_cut=5.0, n_sensitivities=3, r_min=0.9, kind="gaussian")
    meta = desc.features("O")
    assert len(meta) == desc.n_features == 6
    assert meta[3] == {
        "type": "neighbor_sum",
        "kind": "gaussian",
        "center": "O",
        "neighbor": "O",
        "nu": 1,
        "mu": pytest.approx(desc.mu[1].item()),
        "sigma": desc.sigma,
        "r_min": 0.9,
        "rc": 5.0,
        "cutoff": "cos2",
    }
    again = NeighborSum.from_dict(desc.to_dict())
    assert again.to_dict() == desc.to_dict()
    torch.testing.assert_close(again.mu, desc.mu)


def test_errors_name_the_problem() -> None:
    desc = NeighborSum(["H", "O"], r_cut=4.0)
    with pytest.raises(DescriptorError, match=r"structure 1, atom 0: atomic number 6"):
        desc.compute([WATER, Atoms("CH")])
    with pytest.raises(DescriptorError, match="kind must be one of"):
        NeighborSum(["H"], r_cut=4.0, kind="bessel")
    with pytest.raises(DescriptorError, match="r_min < r_max <= r_cut"):
        NeighborSum(["H"], r_cut=4.0, r_min=5.0)
    with pytest.raises(DescriptorError, match="not a neighbor_sum"):
        NeighborSum.from_dict({"type": "acsf"})


@pytest.mark.parametrize("dtype", [torch.int64, torch.float16, torch.bfloat16, torch.complex64])
def test_compute_refuses_a_dtype_other_than_float32_or_float64(dtype: torch.dtype) -> None:
    """As ACSF.compute: one DescriptorError, not torch's or numpy's error from deep inside
    (an integer dtype used to truncate the pair vectors first)."""
    desc = NeighborSum(["H", "O"], r_cut=4.0, n_sensitivities=3)
    with pytest.raises(DescriptorError, match=r"dtype must be torch\.float32 or torch\.float64"):
        desc.compute(WATER, derivatives=True, dtype=dtype)


def test_float32_stays_float32_and_matches_hippynn(rng: np.random.Generator) -> None:
    """float32 values and dG/dr (no upcast) equal hippynn's float32 sensitivities summed by
    its envsum, and autograd through them in float64, to float32 rounding."""
    sens = pytest.importorskip("hippynn.layers.hiplayers.sensitivity")
    env_pytorch = pytest.importorskip("hippynn.custom_kernels.env_pytorch")
    atoms = _periodic(rng)
    desc = NeighborSum(["H", "C", "O"], r_cut=4.0, n_sensitivities=5, r_min=0.8)
    module = sens.InverseSensitivityModule(5, 0.8, 4.0, 4.0)  # float32, its own μ and σ
    pf, ps, vec = _ase_pairs(atoms, 4.0)
    res = desc.compute(atoms, derivatives=True, neighbors=(pf, ps, vec), dtype=torch.float32)
    species = torch.as_tensor([desc.elements.index(s) for s in atoms.get_chemical_symbols()])
    v = torch.as_tensor(vec, dtype=torch.float32)
    onehot = torch.nn.functional.one_hot(species, 3).float()
    sense = module(v.norm(dim=1), warn_low_distances=False)
    env = env_pytorch.envsum(sense, onehot, torch.as_tensor(pf), torch.as_tensor(ps))
    theirs = env.reshape(len(atoms), -1)
    v64 = torch.as_tensor(vec).requires_grad_()
    jac = torch.autograd.functional.jacobian(
        lambda x: desc(species, torch.as_tensor(pf), torch.as_tensor(ps), x), v64
    )  # (N, F, P, 3) float64
    sp = species.numpy()
    for center, e in res.items():
        assert e.values.dtype == torch.float32
        torch.testing.assert_close(e.values, theirs[e.atom_index], rtol=1e-5, atol=1e-6)
        for neighbor, block in e.pairs.items():
            assert block.dG_dr.dtype == torch.float32 and block.vectors.dtype == torch.float32
            rows = np.flatnonzero(  # ASE's pairs are all inside r_cut, kept in their order
                (sp[pf] == desc.elements.index(center)) & (sp[ps] == desc.elements.index(neighbor))
            )
            np.testing.assert_array_equal(block.pair_second, ps[rows])
            expected = jac[pf[rows], :, rows][:, block.feature_index]  # (P_ef, F_ef, 3)
            torch.testing.assert_close(
                block.dG_dr, expected, rtol=1e-4, atol=1e-6, check_dtype=False
            )


def test_batch_of_structures_equals_one_by_one(rng: np.random.Generator) -> None:
    from dparallel.types import StructureBatch

    periodic = _periodic(rng)
    desc = NeighborSum(["H", "C", "O"], r_cut=4.0, n_sensitivities=3)
    batch = StructureBatch.from_ase([WATER, periodic])
    both = desc.compute(batch, derivatives=True)
    alone = [desc.compute(WATER, derivatives=True), desc.compute(periodic, derivatives=True)]
    for s in both:
        rows = [a[s].values for a in alone if s in a]
        np.testing.assert_allclose(both[s].values, np.concatenate(rows), rtol=1e-12)
    h2 = both["H"].pairs["O"]
    n_water = len(alone[0]["H"].pairs["O"].pair_first)
    np.testing.assert_array_equal(h2.pair_first[n_water:], alone[1]["H"].pairs["O"].pair_first + 3)
    np.testing.assert_allclose(h2.dG_dr[n_water:], alone[1]["H"].pairs["O"].dG_dr, rtol=1e-12)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"r_cut": float("inf")}, r"neighbor_sum\.r_cut: Input should be a finite number"),
        ({"r_cut": 1.0e4}, r"neighbor_sum\.r_cut: .*r_cut = 10000 Å is beyond 50 Å.*units"),
        ({"sigma": 0.0}, r"neighbor_sum\.sigma: Input should be greater than 0"),
        ({"sigma": -1.0, "kind": "gaussian"}, r"neighbor_sum\.sigma: Input should be greater"),
        ({"r_max": float("nan")}, r"neighbor_sum\.r_max: Input should be a finite number"),
    ],
)
def test_the_spec_refuses_what_has_no_meaning(given: dict, expected: str, tmp_path) -> None:  # noqa: ANN001
    """``r_cut: .inf`` and ``sigma: 0`` passed; ``r_cut: 1.0e4`` passed and a worker then
    failed allocating petabytes (ACSF refuses cutoffs past the same MAX_R_CUT)."""
    import yaml

    from dparallel.descriptors.acsf_functions import MAX_R_CUT
    from dparallel.errors import ConfigError
    from dparallel.workflow.descriptors_spec import load_descriptors

    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump({"neighbor_sum": {"elements": ["Cu"], **given}}))
    with pytest.raises(ConfigError, match=expected):
        load_descriptors(path)
    assert MAX_R_CUT == 50.0
    path.write_text(yaml.safe_dump({"neighbor_sum": {"elements": ["Cu"], "r_cut": MAX_R_CUT}}))
    assert load_descriptors(path).r_cut == MAX_R_CUT


def test_the_constructor_refuses_what_has_no_meaning() -> None:
    for kwargs, expected in [
        ({"r_cut": float("inf")}, "need finite r_cut"),
        ({"r_cut": 1e4}, "beyond 50 Å"),
        ({"r_cut": 4.0, "sigma": 0.0}, "sigma must be a finite width > 0"),
        ({"r_cut": 4.0, "sigma": float("nan"), "kind": "gaussian"}, "sigma must be"),
    ]:
        with pytest.raises(DescriptorError, match=expected):
            NeighborSum(["H"], **kwargs)
