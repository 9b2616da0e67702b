"""The compiled (numba) backend against the vectorised torch reference on random inputs."""

from __future__ import annotations

import ase
import numpy as np
import pytest
import torch
from acsf_unchecked import allow_any_parameters

from dparallel.descriptors import ACSF, Backend
from dparallel.descriptors._acsf_backends import numba_available
from dparallel.errors import BackendUnavailableError, DescriptorError
from dparallel.types import StructureBatch

pytestmark = pytest.mark.skipif(not numba_available(), reason="numba not installed")


@pytest.mark.parametrize("cutoff", range(9))
def test_numba_equals_torch(cutoff: int) -> None:
    rng = np.random.default_rng(cutoff)
    acsf = ACSF.uniform(
        ["H", "C", "O"],
        r_cut=3.8,
        cutoff=cutoff,
        alpha=0.0 if cutoff in (2, 3) else 0.15,
        radial=[(0.5, 0.0), (1.0, 1.1)],
        narrow=[(0.2, 1.0, -1.0, 0.0), (0.1, 2.5, 1.0, 0.6)],
        wide=[(0.3, 4.0, 1.0, 0.0), (0.05, 1.0, -1.0, 1.2)],
    )
    cell = np.diag(rng.uniform(2.8, 4.0, 3)) + rng.uniform(-0.5, 0.5, (3, 3)) * (1 - np.eye(3))
    structs = [
        ase.Atoms(
            numbers=rng.choice([1, 6, 8], 6),
            scaled_positions=rng.random((6, 3)),
            cell=cell,
            pbc=[True, True, bool(cutoff % 2)],
        ),
        ase.Atoms("CH4", positions=rng.normal(scale=1.0, size=(5, 3))),
    ]
    for dtype in (torch.float64, torch.float32):
        a = acsf.compute(structs, derivatives=True, backend="torch", dtype=dtype)
        b = acsf.compute(structs, derivatives=True, backend="numba", dtype=dtype)
        tol = 1e-12 if dtype == torch.float64 else 1e-4  # numba accumulates in float64
        for e in a:
            assert b[e].values.dtype == dtype
            np.testing.assert_allclose(b[e].values, a[e].values, rtol=tol, atol=tol)
            for f in a[e].pairs:
                np.testing.assert_allclose(
                    b[e].pairs[f].dG_dr, a[e].pairs[f].dG_dr, rtol=tol, atol=tol
                )


def test_numba_equals_torch_for_any_zeta_lambda_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    """n2p2's formulas in both backends: ζ < 1, ζ ≤ 0 integers, λ ≠ ±1, η < 0 (the kernels
    compute them; ACSF itself refuses λ ≠ ±1 and η < 0: bypassed here)."""
    allow_any_parameters(monkeypatch)
    rng = np.random.default_rng(7)
    acsf = ACSF.uniform(
        ["H", "O"],
        r_cut=4.0,
        cutoff="cos",
        radial=[(-0.03, 0.5)],
        narrow=[(0.2, 0.5, 0.8, 0.0), (0.1, -2.0, 0.5, 0.7), (0.1, 2.0, 2.0, 0.0)],
        wide=[(-0.01, 0.0, -3.0, 0.0), (0.3, 3.0, -2.5, 0.4), (0.2, 1.5, 1.0, 0.0)],
    )
    cell = np.diag(rng.uniform(3.0, 4.0, 3))
    structs = [
        ase.Atoms(
            numbers=rng.choice([1, 8], 8), scaled_positions=rng.random((8, 3)), cell=cell, pbc=True
        )
    ]
    a = acsf.compute(structs, derivatives=True, backend="torch")
    b = acsf.compute(structs, derivatives=True, backend="numba")
    for e in a:
        assert torch.isfinite(a[e].values).all()
        np.testing.assert_allclose(b[e].values, a[e].values, rtol=1e-12, atol=1e-12)
        for f in a[e].pairs:
            np.testing.assert_allclose(
                b[e].pairs[f].dG_dr, a[e].pairs[f].dG_dr, rtol=1e-11, atol=1e-12
            )


def test_numba_refuses_grad() -> None:
    acsf = ACSF.uniform(["H"], 3.0, narrow=[(0.1, 1, 1, 0)])
    atoms = ase.Atoms("H3", positions=[[0, 0, 0], [1, 0, 0], [0, 1, 0]])
    pos = torch.tensor(atoms.get_positions(), requires_grad=True)
    with pytest.raises(DescriptorError, match="not differentiable"):
        acsf.compute([atoms], positions=pos, backend="numba")
    with pytest.raises(BackendUnavailableError, match="unknown ACSF backend 'cuda'"):
        acsf.compute([atoms], backend="cuda")
    out = acsf.compute([atoms], positions=pos)  # auto → torch
    assert out["H"].values.requires_grad


@pytest.mark.parametrize("backend", ["torch", "numba"])
def test_isolated_atoms_and_absent_elements(backend: str) -> None:
    acsf = ACSF.uniform(["H", "C", "O"], 3.0, radial=[(0.5, 0.0)], narrow=[(0.1, 1, 1, 0)])
    far = ase.Atoms("HO", positions=[[0, 0, 0], [10, 0, 0]])  # no pairs, no carbon
    out = acsf.compute([far], derivatives=True, backend=backend)
    assert out["C"].values.shape == (0, acsf.n_features("C"))
    assert out["H"].values.shape == (1, acsf.n_features("H"))
    assert float(out["H"].values.abs().sum()) == 0.0
    for pd in out["O"].pairs.values():
        assert pd.dG_dr.shape[0] == 0


@pytest.mark.parametrize("path", ["separable", "triplets"])
def test_wide_functions_both_paths_equal_torch(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """Type 9 with integer ζ and |λ| ≤ 1: O(n) tensor sums or neighbour pairs, same result."""
    from dparallel.kernels import acsf_plan

    allow_any_parameters(monkeypatch)  # |λ| < 1
    monkeypatch.setattr(acsf_plan, "SEPARABLE_MIN_NEIGHBORS", 0 if path == "separable" else 10**9)
    rng = np.random.default_rng(5)
    acsf = ACSF.uniform(
        ["H", "C", "O"],
        r_cut=4.0,
        cutoff="poly3",
        alpha=0.1,
        radial=[(0.5, 0.0)],
        narrow=[(0.2, 2.0, -1.0, 0.3)],
        wide=[(0.3, z, lam, rs) for z, lam, rs in ((1.0, 1.0, 0.0), (2.0, -1.0, 0.5),
                                                   (3.0, 0.5, 0.0), (6.0, -0.3, 1.1))],
    )  # fmt: skip
    cell = np.diag(rng.uniform(3.0, 3.6, 3))
    structs = [
        ase.Atoms(
            numbers=rng.choice([1, 6, 8], 8),
            scaled_positions=rng.random((8, 3)),
            cell=cell,
            pbc=True,
        ),
        ase.Atoms("CHO", positions=[[0, 0, 0], [1.1, 0, 0], [0, 1.3, 0.2]]),  # 1-2 neighbours
    ]
    a = acsf.compute(structs, derivatives=True, backend="torch")
    b = acsf.compute(structs, derivatives=True, backend="numba")
    for e in a:
        np.testing.assert_allclose(b[e].values, a[e].values, rtol=1e-11, atol=1e-14)
        for f in a[e].pairs:
            np.testing.assert_allclose(
                b[e].pairs[f].dG_dr, a[e].pairs[f].dG_dr, rtol=1e-10, atol=1e-12
            )


def test_float32_compute_with_float64_sums() -> None:
    """Backend("numba", float32_terms=True): triplet terms in float32, sums in float64
    (≈1e-7 relative)."""
    rng = np.random.default_rng(3)
    acsf = ACSF.uniform(
        ["H", "O"],
        r_cut=4.0,
        cutoff="tanhu",
        radial=[(0.5, 0.0), (0.2, 1.0)],
        narrow=[(0.1, 1.0, -1.0, 0.0), (0.05, 4.0, 1.0, 0.5)],
        wide=[(0.2, 2.0, 1.0, 0.0)],
    )
    atoms = ase.Atoms(
        numbers=rng.choice([1, 8], 12), scaled_positions=rng.random((12, 3)),
        cell=np.diag([4.5, 4.2, 4.8]), pbc=True,
    )  # fmt: skip
    ref = acsf.compute([atoms], derivatives=True, backend="numba")
    f32 = acsf.compute([atoms], derivatives=True, backend=Backend("numba", float32_terms=True))
    for e in ref:
        assert f32[e].values.dtype == torch.float64
        np.testing.assert_allclose(f32[e].values, ref[e].values, rtol=2e-6, atol=1e-12)
        for f, pd in ref[e].pairs.items():
            scale = float(pd.dG_dr.abs().max())
            np.testing.assert_allclose(f32[e].pairs[f].dG_dr, pd.dG_dr, rtol=0, atol=2e-6 * scale)
    with pytest.raises(DescriptorError, match="dtype must be"):
        acsf.compute([atoms], dtype=torch.float16)
    batch = StructureBatch.from_ase([atoms])
    with pytest.raises(DescriptorError, match=r"^derivative_dtype must be 'float64' or 'float32'"):
        acsf.compute_arrays(batch, derivative_dtype="float16")
