"""The Triton envsum / sensesum / featsum backend against the torch reference.

On CPU the kernels run in Triton's interpreter (see ``triton_interpreter``); gradients and
double backward go through the existing autograd Functions with ``backend="triton"``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch
import triton_interpreter as ti

from dparallel.errors import BackendUnavailableError
from dparallel.kernels import neighbor_sums as ns
from dparallel.kernels._backends.triton_env import interpreting

if TYPE_CHECKING:
    from collections.abc import Iterator

ti.skip_without_triton()


@pytest.fixture(scope="module")
def in_process() -> Iterator[bool]:
    """Whether the kernels run here (TRITON_INTERPRET set now if needed; restored after),
    with the backend loaded afresh (an import failure before the variable was set forgotten)."""
    ns._import_errors.pop("triton", None)
    yield ti.setup()
    ti.restore()
    ns._modules.pop("triton", None)  # later modules see the switch as before
    ns._import_errors.pop("triton", None)
    sys.modules.pop(ns.BACKENDS["triton"][0], None)


@pytest.fixture(autouse=True)
def _kernel_runs_here(request: pytest.FixtureRequest, in_process: bool) -> None:
    ti.skip_unless_here(request, in_process)


def _device() -> str:
    """Where the kernels run: the GPU, or the CPU in Triton's interpreter."""
    return "cpu" if interpreting() or not torch.cuda.is_available() else "cuda"


def _case(dtype: torch.dtype, n: int = 9, p: int = 40, nu: int = 3, f: int = 5, seed: int = 0):  # noqa: ANN202
    """Unsorted pairs with duplicates; the last atom has no pairs (on :func:`_device`)."""
    rng = np.random.default_rng(seed)
    first = torch.as_tensor(rng.integers(0, n - 1, p))
    second = torch.as_tensor(rng.integers(0, n - 1, p))
    first[-4:], second[-4:] = first[:4], second[:4]
    g = torch.Generator().manual_seed(seed)
    sense = torch.randn(p, nu, generator=g, dtype=dtype)
    feat = torch.randn(n, f, generator=g, dtype=dtype)
    env = torch.randn(n, nu, f, generator=g, dtype=dtype)
    return tuple(t.to(_device()) for t in (sense, feat, env, first, second))


def test_cpu_tensors_outside_the_interpreter_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU machine CPU tensors would reach the launcher: refused first, in one line."""
    monkeypatch.setattr(ns, "interpreting", lambda: False)
    sense, feat, _, pf, ps = (t.cpu() for t in _case(torch.float64))
    with pytest.raises(BackendUnavailableError, match="runs on CUDA tensors"):
        ns.envsum(sense, feat, pf, ps, backend="triton")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", [(3, 5), (1, 70), (0, 5), (3, 0)])  # 70: over a block of 64
def test_ops_equal_torch_reference(dtype: torch.dtype, shape: tuple[int, int]) -> None:
    assert "triton" in ns.available_backends()
    sense, feat, env, pf, ps = _case(dtype, nu=shape[0], f=shape[1])
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    for op, args in (
        (ns.envsum, (sense, feat)),
        (ns.sensesum, (env, feat)),
        (ns.featsum, (env, sense)),
    ):
        got = op(*args, pf, ps, backend="triton")
        ref = op(*args, pf, ps, backend="torch")
        assert got.dtype == dtype and got.shape == ref.shape
        torch.testing.assert_close(got, ref, **tol)


def _second_order(op, a: torch.Tensor, b: torch.Tensor, pf, ps, backend: str) -> list:  # noqa: ANN001
    """Gradients of a weighted sum of ``op`` and a Hessian-vector product, by autograd."""
    a, b = a.clone().requires_grad_(), b.clone().requires_grad_()
    out = op(a, b, pf, ps, backend=backend)
    w = torch.linspace(-1.0, 1.0, out.numel(), dtype=out.dtype, device=out.device)
    w = w.view(out.shape)
    ga, gb = torch.autograd.grad((out * w).sum(), (a, b), create_graph=True)
    hv = torch.autograd.grad((ga * ga).sum() + (gb * a.sum()).sum(), (a, b), allow_unused=True)
    return [out, ga, gb, *hv]


def test_gradients_and_double_backward() -> None:
    """First and second derivatives through the autograd Functions equal torch's, and
    gradcheck/gradgradcheck hold on a tiny case."""
    sense, feat, env, pf, ps = _case(torch.float64, n=7, p=20, nu=3, f=4, seed=1)
    for op, a, b in ((ns.envsum, sense, feat), (ns.sensesum, env, feat), (ns.featsum, env, sense)):
        got = _second_order(op, a, b, pf, ps, "triton")
        ref = _second_order(op, a, b, pf, ps, "torch")
        for x, y in zip(got, ref, strict=True):
            if y is None:
                assert x is None
            else:
                torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    sense, feat, _, pf, ps = _case(torch.float64, n=3, p=4, nu=1, f=2, seed=3)
    a, b = sense.requires_grad_(), feat.requires_grad_()

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ns.envsum(x, y, pf, ps, backend="triton")

    assert torch.autograd.gradcheck(fn, (a, b))
    assert torch.autograd.gradgradcheck(fn, (a, b))


def test_deterministic() -> None:
    sense, _, env, pf, ps = _case(torch.float32, p=60, seed=2)
    one = ns.featsum(env, sense, pf, ps, backend="triton")
    assert torch.equal(one, ns.featsum(env, sense, pf, ps, backend="triton"))


def test_module_in_child_process(in_process: bool) -> None:
    ti.module_in_child(__file__, in_process)
