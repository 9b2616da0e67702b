"""The training loss: masked mean squares, equal to boolean-indexed means, no host sync."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

import torch

from dparallel.train.objective import loss

if TYPE_CHECKING:
    import numpy as np


def _labels(rng: np.random.Generator, n_s: int, n_a: int, nan_e: list[int], nan_f: list[int]):  # noqa: ANN202
    energy = torch.tensor(rng.normal(size=n_s))
    forces = torch.tensor(rng.normal(size=(n_a, 3)))
    energy[nan_e] = float("nan")
    forces[nan_f] = float("nan")
    counts = torch.tensor(rng.integers(1, 9, n_s), dtype=torch.float64)
    return SimpleNamespace(energy=energy, forces=forces, atom_counts=counts)


def _reference(e: torch.Tensor, f: torch.Tensor, batch: SimpleNamespace, w: float) -> torch.Tensor:
    ok = torch.isfinite(batch.energy)
    out = (((e - batch.energy) / batch.atom_counts)[ok] ** 2).mean()
    okf = torch.isfinite(batch.forces)
    return out + w * ((f - batch.forces)[okf] ** 2).mean()


def test_loss_equals_the_boolean_indexed_means_and_masks_nan_labels(rng) -> None:  # noqa: ANN001
    batch = _labels(rng, 6, 20, nan_e=[1, 4], nan_f=[3, 7])
    e = torch.tensor(rng.normal(size=6), requires_grad=True)
    f = torch.tensor(rng.normal(size=(20, 3)), requires_grad=True)
    got = loss(e, f, batch, 0.3)
    want = _reference(e, f, batch, 0.3)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=0.0)
    g_e, g_f = torch.autograd.grad(got, [e, f])
    w_e, w_f = torch.autograd.grad(want, [e, f])
    torch.testing.assert_close(g_e, w_e, rtol=1e-14, atol=0.0)
    torch.testing.assert_close(g_f, w_f, rtol=1e-14, atol=0.0)
    assert g_e[[1, 4]].eq(0).all() and g_f[[3, 7]].eq(0).all()


def test_loss_without_any_finite_label_is_zero_with_zero_gradients(rng) -> None:  # noqa: ANN001
    batch = _labels(rng, 3, 5, nan_e=[0, 1, 2], nan_f=[0, 1, 2, 3, 4])
    e = torch.tensor(rng.normal(size=3), requires_grad=True)
    f = torch.tensor(rng.normal(size=(5, 3)), requires_grad=True)
    got = loss(e, f, batch, 1.0)
    assert got.item() == 0.0
    g_e, g_f = torch.autograd.grad(got, [e, f])
    assert g_e.eq(0).all() and g_f.eq(0).all()
