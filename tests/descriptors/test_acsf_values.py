"""ACSF values against DScribe, an independent NumPy loop, and DESIGN.md reference values."""

from __future__ import annotations

import pickle

import ase
import ase.build
import numpy as np
import pytest
import torch
from acsf_reference import reference
from edge_structures import edge_structures
from scipy.spatial.transform import Rotation

from dparallel.descriptors import ACSF, Backend
from dparallel.errors import DescriptorError
from dparallel.types import StructureBatch

G2 = [(0.0, 0.0), (0.5, 0.0), (0.8, 2.1), (0.05, 3.3)]  # DScribe G1 == (eta=0, rs=0)
G4 = [(0.01, 1.0, 1.0), (0.05, 2.0, -1.0), (0.1, 4.0, 1.0)]
G5 = [(0.02, 1.0, -1.0), (0.005, 2.0, 1.0)]


def _dscribe_pair(species: list[str], r_cut: float) -> tuple[ACSF, object]:
    from dscribe.descriptors import ACSF as DACSF

    ours = ACSF.uniform(
        species,
        r_cut=r_cut,
        cutoff="cos",
        radial=G2,
        narrow=[(e, z, lam, 0.0) for e, z, lam in G4],
        wide=[(e, z, lam, 0.0) for e, z, lam in G5],
    )
    theirs = DACSF(
        r_cut=r_cut,
        g2_params=[list(p) for p in G2[1:]],
        g4_params=[list(p) for p in G4],
        g5_params=[list(p) for p in G5],
        species=species,
        periodic=True,
    )
    return ours, theirs


def _dscribe_order(acsf: ACSF, element: str) -> list[int]:
    """Our columns in DScribe's order, from metadata alone.

    DScribe: per neighbour species [G1, G2...], then per species pair in *column-major*
    order (a, b) = (0,0), (0,1), (1,1), (0,2), (1,2), (2,2)…, each [G4..., G5...].
    """
    els = acsf.elements
    feats = acsf.features(element)
    order = [n for n, f in enumerate(feats) if f["type"] == 2]
    for b in range(len(els)):
        for a in range(b + 1):
            for t in (3, 9):
                order += [
                    n
                    for n, f in enumerate(feats)
                    if f["type"] == t and f["neighbors"] == [els[a], els[b]]
                ]
    assert sorted(order) == list(range(len(feats)))
    return order


def _check_dscribe(structures: list[ase.Atoms], species: list[str], r_cut: float) -> None:
    from ase.data import atomic_numbers

    species = sorted(species, key=lambda s: atomic_numbers[s])  # DScribe's order
    ours, theirs = _dscribe_pair(species, r_cut)
    out = ours.compute(structures)
    batch = StructureBatch.from_ase(structures)
    expect = np.concatenate([np.atleast_2d(theirs.create(a)) for a in structures])
    assert expect.shape[1] == ours.n_features(species[0])
    for e, res in out.items():
        rows = res.atom_index.numpy()
        assert np.all(batch.numbers[rows] == atomic_numbers[e])
        ours_in_their_order = res.values.numpy()[:, _dscribe_order(ours, e)]
        np.testing.assert_allclose(ours_in_their_order, expect[rows], rtol=1e-10, atol=1e-12)


def test_dscribe_periodic_cu_bulk() -> None:
    cu = ase.build.bulk("Cu", "fcc", a=3.61, cubic=True) * (2, 2, 2)
    cu.rattle(0.08, seed=2)
    _check_dscribe([cu], ["Cu"], 5.0)


def test_dscribe_small_triclinic_cells(rng: np.random.Generator) -> None:
    structs = []
    for _ in range(2):
        cell = np.diag(rng.uniform(2.3, 3.2, 3)) + rng.uniform(-0.6, 0.6, (3, 3)) * (1 - np.eye(3))
        structs.append(
            ase.Atoms(
                numbers=rng.choice([1, 8, 29], 3),
                scaled_positions=rng.random((3, 3)),
                cell=cell,
                pbc=True,
            )
        )
    _check_dscribe(structs, ["H", "O", "Cu"], 4.5)


def test_dscribe_multi_element_molecules() -> None:
    mols = [ase.build.molecule(n) for n in ("CH3CH2OH", "C6H6", "H2O", "CH3CONH2")]
    for m in mols:
        m.pbc = False
    _check_dscribe(mols, ["H", "C", "N", "O"], 6.0)


def _for_dscribe(atoms: ase.Atoms) -> ase.Atoms:
    """DScribe refuses a zero-volume cell: unit-free vectors along the open axes (no image
    lies along them, so the structure is the same)."""
    atoms = atoms.copy()
    if atoms.pbc.any() and abs(np.linalg.det(atoms.cell[:])) < 1e-9:
        cell = atoms.cell[:].copy()
        cell[~atoms.pbc] = np.eye(3)[~atoms.pbc] * 50.0
        atoms.set_cell(cell, scale_atoms=False)
    return atoms


def _jacobian(acsf: ACSF, atoms: ase.Atoms, backend: str) -> tuple[np.ndarray, np.ndarray]:
    """G (N, F) and dG_i/dr_k (N, F, N, 3) in DScribe's column order, from our per-pair
    derivatives (r_ij = r_j − r_i + S·cell: +∂G/∂r_ij on j, −∂G/∂r_ij on i)."""
    n, n_f = len(atoms), acsf.n_features(acsf.elements[0])
    values, jac = np.zeros((n, n_f)), np.zeros((n, n_f, n, 3))
    for e, res in acsf.compute([atoms], derivatives=True, backend=backend).items():
        order = _dscribe_order(acsf, e)
        values[res.atom_index.numpy()] = res.values.numpy()[:, order]
        column = np.argsort(order)
        for pd in (res.pairs or {}).values():
            i, j = pd.pair_first.numpy(), pd.pair_second.numpy()
            cols = column[pd.feature_index.numpy()]
            d = pd.dG_dr.numpy()  # (P, F_ef, 3)
            np.add.at(jac, (i[:, None], cols[None, :], j[:, None]), d)
            np.add.at(jac, (i[:, None], cols[None, :], i[:, None]), -d)
    return values, jac


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_dscribe_values_and_derivatives_on_edge_structures(backend, rng) -> None:  # noqa: ANN001
    """Values equal DScribe's; ∂G_i/∂r_k equal central differences of DScribe's values
    (h = 1e-5 Å); lone atoms and atoms without neighbours get zeros, nothing NaN."""
    ours, theirs = _dscribe_pair(["H", "O", "Cu"], 4.5)
    h = 1e-5
    for atoms in edge_structures(rng):
        values, jac = _jacobian(ours, atoms, backend)
        reference = _for_dscribe(atoms)
        np.testing.assert_allclose(
            values, np.atleast_2d(theirs.create(reference)), rtol=1e-10, atol=1e-12
        )
        fd = np.zeros_like(jac)
        for k, x in np.ndindex(len(atoms), 3):
            plus, minus = reference.copy(), reference.copy()
            plus.positions[k, x] += h
            minus.positions[k, x] -= h
            fd[:, :, k, x] = (
                np.atleast_2d(theirs.create(plus)) - np.atleast_2d(theirs.create(minus))
            ) / (2 * h)
        assert np.isfinite(jac).all()
        np.testing.assert_allclose(jac, fd, rtol=0, atol=1e-7)


@pytest.mark.parametrize("cutoff", range(9))
def test_numpy_reference_rs_and_every_cutoff(cutoff: int, rng: np.random.Generator) -> None:
    alpha = 0.0 if cutoff in (2, 3) else 0.25
    acsf = ACSF.uniform(
        ["H", "O"],
        r_cut=4.0,
        cutoff=cutoff,
        alpha=alpha,
        radial=[(0.7, 0.0), (1.3, 1.5)],
        narrow=[(0.2, 1.0, -1.0, 0.0), (0.3, 2.0, 1.0, 1.2)],
        wide=[(0.1, 4.0, 1.0, 0.9), (0.4, 1.0, -1.0, 0.0)],
    )
    cell = np.diag([3.4, 3.1, 3.6]) + 0.3 * (1 - np.eye(3))
    atoms = ase.Atoms("H3O2", scaled_positions=rng.random((5, 3)), cell=cell, pbc=True)
    out = acsf.compute([atoms])
    for e, res in out.items():
        feats = acsf._features[e]
        for row, atom in enumerate(res.atom_index.tolist()):
            np.testing.assert_allclose(
                res.values[row].numpy(), reference(atoms, feats, atom), rtol=1e-11, atol=1e-13
            )


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_a_neighbor_list_in_any_order_gives_the_reference(backend, rng) -> None:
    """A list given by the user (another library's, or reordered) need not be sorted by
    centre: the values equal the NumPy loop's, and ∂G/∂r contracted with any weights
    (what forces do) equal those of the list in order."""
    from dparallel.neighbors import Neighbors, neighbor_list

    acsf = ACSF.uniform(
        ["H", "O"], r_cut=4.0, radial=[(0.7, 0.0)], narrow=[(0.2, 1.0, -1.0, 0.0)],
        wide=[(0.1, 4.0, 1.0, 0.9)],
    )  # fmt: skip
    cell = np.diag([3.4, 3.1, 3.6]) + 0.3 * (1 - np.eye(3))
    atoms = ase.Atoms("H3O2", scaled_positions=rng.random((5, 3)), cell=cell, pbc=True)
    batch = StructureBatch.from_ase([atoms])
    ordered = neighbor_list(batch, 4.0)
    order = rng.permutation(ordered.n_pairs)
    shuffled = Neighbors(*(f[order] for f in ordered))
    both = [
        acsf.compute(batch, derivatives=True, neighbors=nb, backend=backend)
        for nb in (ordered, shuffled)
    ]
    for e, res in both[1].items():
        for row, atom in enumerate(res.atom_index.tolist()):
            np.testing.assert_allclose(
                res.values[row].numpy(), reference(atoms, acsf._features[e], atom),
                rtol=1e-11, atol=1e-13,
            )  # fmt: skip
        weights = torch.from_numpy(rng.normal(size=res.values.shape[1]))
        np.testing.assert_allclose(
            _weighted_gradient(res, weights, batch.n_atoms).numpy(),
            _weighted_gradient(both[0][e], weights, batch.n_atoms).numpy(),
            rtol=1e-11,
            atol=1e-12,
        )


def _weighted_gradient(result, weights, n_atoms: int) -> torch.Tensor:  # noqa: ANN001
    """Σ_i w·∂G_i/∂r_k for every atom k (what forces do with the derivatives)."""
    g = torch.zeros(n_atoms, 3, dtype=torch.float64)
    for pd in result.pairs.values():
        d = torch.einsum("f,pfc->pc", weights[pd.feature_index], pd.dG_dr)
        g = g.index_add(0, pd.pair_second, d).index_add(0, pd.pair_first, -d)
    return g


def _water() -> ase.Atoms:
    return ase.Atoms("OHH", positions=[[0, 0, 0], [0.9572, 0, 0], [-0.2399872, 0.9266272, 0]])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_design_water_reference_values(dtype: torch.dtype) -> None:
    acsf = ACSF.uniform(
        ["H", "O"],
        6.0,
        "cos",
        radial=[(0.5, 0.8)],
        narrow=[(0.05, 2, -1, 0.0)],
        wide=[(0.05, 2, -1, 0.0)],
    )
    out = acsf.compute([_water()], dtype=dtype)
    tol = 1e-9 if dtype == torch.float64 else 2e-6  # references carry 10 decimals
    feats = {e: [(f["type"], tuple(f["neighbors"])) for f in acsf.features(e)] for e in "HO"}
    o = dict(zip(feats["O"], out["O"].values[0].tolist(), strict=False))
    assert out["O"].values.dtype == dtype
    assert o[(2, ("H",))] == pytest.approx(1.8539625099, rel=tol, abs=1e-10)
    assert o[(3, ("H", "H"))] == pytest.approx(0.4769998019, rel=tol, abs=1e-10)
    assert o[(9, ("H", "H"))] == pytest.approx(0.6285957381, rel=tol, abs=1e-10)
    h1 = dict(zip(feats["H"], out["H"].values[0].tolist(), strict=False))
    assert out["H"].atom_index.tolist() == [1, 2]
    assert h1[(2, ("H",))] == pytest.approx(0.6595453299, rel=tol, abs=1e-10)
    assert h1[(2, ("O",))] == pytest.approx(0.9269812538, rel=tol, abs=1e-10)
    assert h1[(3, ("H", "O"))] == pytest.approx(0.0133455875, rel=tol, abs=1e-10)
    assert h1[(9, ("H", "O"))] == pytest.approx(0.0148866288, rel=tol, abs=1e-10)
    rs1 = ACSF.uniform(["H", "O"], 6.0, "cos", narrow=[(0.05, 2, -1, 1.0)])
    assert float(rs1.compute([_water()])["O"].values[0, 0]) == pytest.approx(0.5784465447, rel=1e-9)


def test_invariance_rotation_translation_permutation(rng: np.random.Generator) -> None:
    acsf = ACSF.uniform(
        ["H", "C", "O"],
        5.0,
        radial=[(0.5, 1.0)],
        narrow=[(0.1, 2, 1, 0.5)],
        wide=[(0.05, 1, -1, 0.0)],
    )
    mol = ase.build.molecule("CH3CH2OH")
    base = acsf.compute([mol])
    moved = mol.copy()
    rot = Rotation.random(random_state=5).as_matrix()
    moved.set_positions(mol.get_positions() @ rot.T + [3.0, -1.0, 2.0])
    perm = rng.permutation(len(mol))
    permuted = moved[perm]
    out = acsf.compute([permuted])
    for e in acsf.elements:
        inv = {int(p): n for n, p in enumerate(perm)}
        # row of original atom a in the permuted result
        order = [out[e].atom_index.tolist().index(inv[a]) for a in base[e].atom_index.tolist()]
        np.testing.assert_allclose(
            out[e].values[order].numpy(), base[e].values.numpy(), rtol=1e-11, atol=1e-13
        )


def test_blocks_do_not_change_values() -> None:
    cu = ase.build.bulk("Cu", "fcc", a=3.61) * (3, 3, 3)
    cu.rattle(0.05, seed=1)
    acsf = ACSF.uniform(["Cu"], 5.0, narrow=[(0.01, 1, 1, 0.0)], wide=[(0.02, 2, -1, 0.3)])
    a = acsf.compute([cu], backend="torch")["Cu"].values  # one block
    b = acsf.compute([cu], backend=Backend("torch", max_triplets=997))["Cu"].values
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


def test_metadata_dict_roundtrip_pickle_and_errors() -> None:
    acsf = ACSF.uniform(
        ["H", "O"], 6.0, "poly2", alpha=0.1, radial=[(0.5, 0.8)], narrow=[(0.05, 2, -1, 0.0)]
    )
    assert acsf.elements == ["H", "O"] and acsf.r_cut == 6.0
    f = acsf.features("O")[0]
    assert f == {
        "type": 2,
        "center": "O",
        "neighbors": ["H"],
        "eta": 0.5,
        "rs": 0.8,
        "zeta": None,
        "lambda": None,
        "rc": 6.0,
        "cutoff": "poly2",
        "alpha": 0.1,
    }
    assert acsf.n_features("O") == 2 + 3
    import json

    again = ACSF.from_dict(json.loads(json.dumps(acsf.to_dict())))
    assert again == acsf and pickle.loads(pickle.dumps(acsf)) == acsf
    # one key names a descriptor's type (as NeighborSum's); specs written before say "kind"
    spec = acsf.to_dict()
    assert spec["type"] == "acsf" and "kind" not in spec
    legacy = {("kind" if k == "type" else k): v for k, v in spec.items()}
    assert ACSF.from_dict(legacy) == acsf
    with pytest.raises(DescriptorError, match="type='acsf'"):
        ACSF.from_dict({**spec, "type": "neighbor_sum"})
    with pytest.raises(DescriptorError, match=r"atomic number 6 \(C\) is not among"):
        acsf.compute([ase.build.molecule("CH4")])
    with pytest.raises(DescriptorError, match="element 'C' not in this ACSF"):
        acsf.features("C")
    with pytest.raises(DescriptorError, match="unknown cutoff"):
        ACSF.uniform(["H"], 6.0, "gauss", radial=[(1.0, 0.0)])


@pytest.mark.parametrize("cutoff", ["cos", "poly2"])
def test_values_do_not_depend_on_computing_derivatives(cutoff: str) -> None:
    """The compiled kernel's narrow angular terms were rounded in another order without
    derivatives (an ulp apart in ~10 % of the values): a store featurized without dG/dr and
    one with them recorded different statistics, and training computing them differed."""
    pytest.importorskip("numba")
    frames = []
    for seed in range(3):
        atoms = ase.build.bulk("Cu", "fcc", a=3.9, cubic=True) * (2, 2, 2)
        atoms.numbers[np.random.default_rng(seed).random(len(atoms)) < 0.4] = 79  # Au
        atoms.rattle(0.15, seed=seed)
        frames.append(atoms)
    acsf = ACSF.uniform(
        ["Cu", "Au"], r_cut=4.5, cutoff=cutoff, alpha=0.2, radial=[(0.05, 0.0), (2.0, 2.5)],
        narrow=[(0.01, 1.0, -1.0, 0.0), (0.01, 1.0, 1.0, 0.5), (0.03, 4.0, 1.0, 0.0)],
        wide=[(0.02, 3.0, 1.0, 1.0)],
    )  # fmt: skip
    batch = StructureBatch.from_ase(frames)
    with_d = acsf.compute_arrays(batch, derivatives=True)
    without = acsf.compute_arrays(batch, derivatives=False)
    for element, arrays in with_d.items():
        assert arrays["values"].shape[0] > 0
        np.testing.assert_array_equal(without[element]["values"], arrays["values"])
