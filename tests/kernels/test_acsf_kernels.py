"""Cutoff functions against the n2p2 formulas; triplet enumeration against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dparallel.errors import DescriptorError
from dparallel.kernels.acsf_terms import angular_factor, triplet_blocks, triplet_counts, triplets
from dparallel.kernels.cutoffs import (
    CUTOFF_TYPES,
    cutoff_fn,
    cutoff_fn_and_derivative,
    cutoff_type_id,
)


def n2p2_cutoff(r: float, rc: float, kind: int, alpha: float) -> float:
    """Independent scalar transcription of n2p2's CutoffFunction."""
    if r >= rc:
        return 0.0
    if kind == 2:
        return math.tanh(1 - r / rc) ** 3
    if kind == 3:
        return math.tanh(1 - r / rc) ** 3 / math.tanh(1.0) ** 3
    rci = alpha * rc
    if r < rci:
        return 1.0
    x = (r - rci) / (rc - rci)
    return {
        0: lambda: 1.0,
        1: lambda: 0.5 * (math.cos(math.pi * x) + 1),
        4: lambda: math.exp(1 - 1 / (1 - x * x)),
        5: lambda: (2 * x - 3) * x * x + 1,
        6: lambda: ((15 - 6 * x) * x - 10) * x**3 + 1,
        7: lambda: (x * (x * (20 * x - 70) + 84) - 35) * x**4 + 1,
        8: lambda: (x * (x * ((315 - 70 * x) * x - 540) + 420) - 126) * x**5 + 1,
    }[kind]()


@pytest.mark.parametrize("kind", sorted(CUTOFF_TYPES))
@pytest.mark.parametrize("alpha", [0.0, 0.3])
def test_cutoff_values_and_derivative(kind: int, alpha: float) -> None:
    rc = 5.0
    r = torch.linspace(0.05, 6.0, 301, dtype=torch.float64)
    f, df = cutoff_fn_and_derivative(r, rc, kind, alpha)
    expect = [n2p2_cutoff(float(x), rc, kind, alpha) for x in r]
    np.testing.assert_allclose(f.numpy(), expect, rtol=1e-12, atol=1e-14)
    rr = r.clone().requires_grad_(True)
    out = cutoff_fn(rr, rc, kind, alpha).sum()
    g = torch.autograd.grad(out, rr)[0] if out.requires_grad else torch.zeros_like(r)
    np.testing.assert_allclose(df.numpy(), g.numpy(), rtol=1e-10, atol=1e-12)
    if kind != 0:  # every type but hard reaches 0 at rc
        assert (
            float(cutoff_fn(torch.tensor([rc - 1e-9], dtype=torch.float64), rc, kind, alpha)) < 1e-6
        )


def test_cutoff_names() -> None:
    assert cutoff_type_id("cos") == 1 and cutoff_type_id("POLY2") == 6 and cutoff_type_id(8) == 8
    assert cutoff_type_id("4") == 4
    with pytest.raises(DescriptorError, match="unknown cutoff 'cosine'"):
        cutoff_type_id("cosine")


def test_angular_factor_matches_pow_and_autograd() -> None:
    c = torch.linspace(-1, 1, 51, dtype=torch.float64, requires_grad=True)
    zeta, lam = [1.0, 2.0, 4.0, 2.5], [1.0, -1.0, 1.0, 1.0]
    z, dz = angular_factor(c, zeta, lam, derivative=True)
    for k in range(4):
        expect = 2 ** (1 - zeta[k]) * (1 + lam[k] * c.detach()) ** zeta[k]
        np.testing.assert_allclose(z[:, k].detach().numpy(), expect.numpy(), rtol=1e-12, atol=1e-15)
        (g,) = torch.autograd.grad(z[:, k].sum(), c, retain_graph=True)
        np.testing.assert_allclose(dz[:, k].detach().numpy(), g.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("zeta", [0.5, 2.5, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0])
@pytest.mark.parametrize("lam", [0.5, 2.0, -3.0, -1.0])
def test_angular_factor_n2p2_semantics(zeta: float, lam: float) -> None:
    """Any real ζ and λ; the term and its derivative are 0 where 1 + λ cos θ ≤ 0 (n2p2)."""
    c = torch.linspace(-1, 1, 41, dtype=torch.float64)
    z, dz = angular_factor(c, [zeta], [lam], derivative=True)
    base = 1 + lam * c.numpy()
    inside = base > 0
    expect = np.zeros_like(base)
    expect[inside] = 2 ** (1 - zeta) * base[inside] ** zeta
    np.testing.assert_allclose(z[:, 0].numpy(), expect, rtol=1e-12, atol=0)
    d_expect = np.zeros_like(base)
    d_expect[inside] = 2 ** (1 - zeta) * zeta * lam * base[inside] ** (zeta - 1)
    np.testing.assert_allclose(dz[:, 0].numpy(), d_expect, rtol=1e-12, atol=0)
    cg = c.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(angular_factor(cg, [zeta], [lam])[0].sum(), cg)
    np.testing.assert_allclose(g.numpy(), d_expect, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("block", [1, 3, 7, 1000])
def test_triplets_enumerate_all_unordered_pairs_per_centre(block: int) -> None:
    rng = np.random.default_rng(block)
    center = torch.from_numpy(np.sort(rng.integers(0, 6, 40)))
    counts = triplet_counts(center, 6)
    got = []
    for a, b in triplet_blocks(counts, block):
        tj, tk = triplets(counts, a, b)
        assert tj.numel() <= max(block, int(counts[a:b].max()))
        got += list(zip(tj.tolist(), tk.tolist(), strict=False))
    c = center.tolist()
    expect = [(j, k) for j in range(40) for k in range(j + 1, 40) if c[j] == c[k]]
    assert got == expect


@pytest.mark.parametrize("m", [1, 3, 4, 7, 8, 13, 48])
@pytest.mark.parametrize("n", [1, 5, 12, 48])
def test_fused_network_matvec_and_transposed_product_equal_numpy(m: int, n: int) -> None:
    """The fused network's products (four rows at a time, remainder rows one by one)."""
    pytest.importorskip("numba")
    from dparallel.kernels.mlp_numba import _add_rows, _matvec

    rng = np.random.default_rng(m * 100 + n)
    mat = rng.normal(size=(m, n))
    x, bias = rng.normal(size=n), rng.normal(size=m)
    out = np.full(m + 2, 7.0)  # wider than m: the rest untouched
    _matvec(mat, x, bias, out)
    np.testing.assert_allclose(out[:m], bias + mat @ x, rtol=1e-13, atol=1e-13)
    assert (out[m:] == 7.0).all()
    g, acc = rng.normal(size=m), rng.normal(size=n + 2)
    expect = acc.copy()
    expect[:n] += g @ mat
    _add_rows(mat, g, acc)  # adds to what is there
    np.testing.assert_allclose(acc, expect, rtol=1e-13, atol=1e-13)
