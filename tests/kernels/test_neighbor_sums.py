"""envsum / sensesum / featsum: worked example, adjoint identity, gradients, peers."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
import torch

import dparallel.kernels as K
from dparallel.errors import BackendUnavailableError, KernelInputError
from dparallel.kernels import neighbor_sums as ns

if TYPE_CHECKING:
    import numpy as np

BACKENDS = K.available_backends()
DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10)}


def _random_case(rng: np.random.Generator, dtype: torch.dtype, n=23, p=211, nu=5, f=7):
    """Unsorted pairs with duplicates; atoms n-1, n-2 have no pairs at all."""
    first = rng.integers(0, n - 2, p)
    second = rng.integers(0, n - 2, p)
    first[-10:], second[-10:] = first[:10], second[:10]  # exact duplicate pairs
    g = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    mk = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    return (
        mk(p, nu),
        mk(n, f),
        mk(n, nu, f),
        torch.as_tensor(first, dtype=torch.int64),
        torch.as_tensor(second, dtype=torch.int64),
    )


# worked example, derived by hand in docs/kernels.md
Z = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
S = [[1.0, 0.0], [0.0, 1.0], [2.0, 3.0], [1.0, 1.0]]
FIRST, SECOND = [0, 0, 1, 0], [1, 2, 0, 1]
ENV = [[[6.0, 8.0], [8.0, 10.0]], [[2.0, 4.0], [3.0, 6.0]], [[0.0, 0.0], [0.0, 0.0]]]
SENSE = [[50.0, 64.0], [78.0, 100.0], [10.0, 15.0], [50.0, 64.0]]
FEAT = [[13.0, 26.0], [20.0, 26.0], [8.0, 10.0]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_worked_example(backend: str, dtype: torch.dtype) -> None:
    t = lambda x: torch.tensor(x, dtype=dtype)  # noqa: E731
    pf, ps = torch.tensor(FIRST), torch.tensor(SECOND)
    env = K.envsum(t(S), t(Z), pf, ps, backend=backend)
    assert env.dtype == dtype
    torch.testing.assert_close(env, t(ENV), rtol=0, atol=0)
    torch.testing.assert_close(K.sensesum(t(ENV), t(Z), pf, ps, backend=backend), t(SENSE))
    torch.testing.assert_close(K.featsum(t(ENV), t(S), pf, ps, backend=backend), t(FEAT))


@pytest.mark.parametrize("backend", BACKENDS)
def test_adjoint_identity(backend: str, rng: np.random.Generator) -> None:
    s, z, e, pf, ps = _random_case(rng, torch.float64)
    a = (K.envsum(s, z, pf, ps, backend=backend) * e).sum()
    b = (s * K.sensesum(e, z, pf, ps, backend=backend)).sum()
    c = (z * K.featsum(e, s, pf, ps, backend=backend)).sum()
    # all three equal T(E, s, z) computed directly from its definition
    t = torch.einsum("pna,pn,pa->", e[pf], s, z[ps])
    torch.testing.assert_close(a, t, rtol=1e-12, atol=0)
    torch.testing.assert_close(b, t, rtol=1e-12, atol=0)
    torch.testing.assert_close(c, t, rtol=1e-12, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_backends_equal_reference(backend: str, dtype, rng, monkeypatch) -> None:
    from dparallel.kernels._backends import chunked

    monkeypatch.setattr(chunked, "BLOCK_BYTES", 2000)  # many blocks, ragged last block
    s, z, e, pf, ps = _random_case(rng, dtype, n=61, p=1500, nu=6, f=9)
    ref = dict(backend="torch")
    got = dict(backend=backend)
    torch.testing.assert_close(
        K.envsum(s, z, pf, ps, **got), K.envsum(s, z, pf, ps, **ref), **TOL[dtype]
    )
    torch.testing.assert_close(
        K.sensesum(e, z, pf, ps, **got), K.sensesum(e, z, pf, ps, **ref), **TOL[dtype]
    )
    torch.testing.assert_close(
        K.featsum(e, s, pf, ps, **got), K.featsum(e, s, pf, ps, **ref), **TOL[dtype]
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradcheck_and_gradgradcheck(backend: str, rng: np.random.Generator) -> None:
    s, z, e, pf, ps = _random_case(rng, torch.float64, n=9, p=31, nu=3, f=4)
    s, z, e = (x.requires_grad_() for x in (s, z, e))
    ops = [
        (lambda a, b: K.envsum(a, b, pf, ps, backend=backend), (s, z)),
        (lambda a, b: K.sensesum(a, b, pf, ps, backend=backend), (e, z)),
        (lambda a, b: K.featsum(a, b, pf, ps, backend=backend), (e, s)),
    ]
    for fn, inputs in ops:
        assert torch.autograd.gradcheck(fn, inputs)
        assert torch.autograd.gradgradcheck(fn, inputs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_pairs(backend: str) -> None:
    pf = ps = torch.zeros(0, dtype=torch.int64)
    s = torch.zeros(0, 3, dtype=torch.float64, requires_grad=True)
    z = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    env = K.envsum(s, z, pf, ps, backend=backend)
    assert env.shape == (4, 3, 2) and not env.any()
    g_s, g_z = torch.autograd.grad(env.sum(), (s, z))
    assert g_s.shape == (0, 3) and not g_z.any()
    e = torch.randn(4, 3, 2, dtype=torch.float64)
    assert K.sensesum(e, z, pf, ps, backend=backend).shape == (0, 3)
    assert not K.featsum(e, s, pf, ps, backend=backend).any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_and_int32_indices(backend: str, rng: np.random.Generator) -> None:
    s, z, _e, pf, ps = _random_case(rng, torch.float64)
    s_t = s.t().contiguous().t()  # same values, transposed strides
    got = K.envsum(s_t, z, pf.to(torch.int32), ps.to(torch.int32), backend=backend)
    torch.testing.assert_close(got, K.envsum(s, z, pf, ps, backend="torch"))


@pytest.mark.slow
def test_matches_hippynn_pytorch_and_numba(rng: np.random.Generator) -> None:
    env_pytorch = pytest.importorskip("hippynn.custom_kernels.env_pytorch")
    peers = {"hippynn-pytorch": (env_pytorch.envsum, env_pytorch.sensesum, env_pytorch.featsum)}
    try:
        from hippynn.custom_kernels import env_numba
    except ImportError:  # pragma: no cover - numba missing
        pass
    else:
        peers["hippynn-numba"] = (
            env_numba.new_envsum,
            env_numba.new_sensesum,
            env_numba.new_featsum,
        )
    for dtype in DTYPES:
        s, z, e, pf, ps = _random_case(rng, dtype, n=40, p=900, nu=4, f=6)
        for name, (h_env, h_sense, h_feat) in peers.items():
            for backend in BACKENDS:
                kw = dict(backend=backend)
                msg = f"{name} vs {backend} {dtype}"
                torch.testing.assert_close(
                    K.envsum(s, z, pf, ps, **kw), h_env(s, z, pf, ps), **TOL[dtype], msg=msg
                )
                torch.testing.assert_close(
                    K.sensesum(e, z, pf, ps, **kw), h_sense(e, z, pf, ps), **TOL[dtype], msg=msg
                )
                torch.testing.assert_close(
                    K.featsum(e, s, pf, ps, **kw), h_feat(e, s, pf, ps), **TOL[dtype], msg=msg
                )


# ---------------------------------------------------------------- the switch


@pytest.fixture
def fresh_switch(monkeypatch):
    """Isolate the module-level backend state."""
    monkeypatch.setattr(ns, "_selected", None)
    monkeypatch.setattr(ns, "_fallback_logged", False)
    monkeypatch.setattr(ns, "_modules", dict(ns._modules))
    monkeypatch.setattr(ns, "_import_errors", dict(ns._import_errors))
    return monkeypatch


def test_set_and_get_backend(fresh_switch) -> None:
    fresh_switch.delenv(ns.ENV_VAR, raising=False)
    assert K.get_backend() == ("numba" if "numba" in BACKENDS else "chunked")
    K.set_backend("TORCH")
    assert K.get_backend() == "torch"
    with K.use_backend("chunked"):
        assert K.get_backend() == "chunked"
    assert K.get_backend() == "torch"


def test_unknown_backend_message(fresh_switch) -> None:
    with pytest.raises(
        BackendUnavailableError, match=r"unknown kernel backend 'cuda-magic'.*'chunked'"
    ):
        K.set_backend("cuda-magic")


def test_env_var(fresh_switch) -> None:
    fresh_switch.setenv(ns.ENV_VAR, "chunked")
    assert K.get_backend() == "chunked"
    ns._selected = None
    fresh_switch.setenv(ns.ENV_VAR, "nonsense")
    with pytest.raises(BackendUnavailableError, match="DPARALLEL_KERNEL_BACKEND"):
        K.get_backend()


def test_unavailable_backend_and_auto_fallback(fresh_switch, caplog) -> None:
    fresh_switch.delenv(ns.ENV_VAR, raising=False)
    ns._modules.pop("numba", None)
    ns._import_errors["numba"] = "ModuleNotFoundError: No module named 'numba'"
    assert [b for b in K.available_backends() if b != "triton"] == ["torch", "chunked"]
    with pytest.raises(BackendUnavailableError, match=r"'numba'.*unavailable: ModuleNotFound"):
        K.set_backend("numba")
    with caplog.at_level(logging.WARNING, logger=ns.__name__):
        K.set_backend("auto")
        assert K.get_backend() == "chunked"
    assert "falling back to 'chunked'" in caplog.text


@pytest.mark.skipif("numba" not in BACKENDS, reason="numba not installed")
def test_numba_respects_torch_thread_budget(rng: np.random.Generator) -> None:
    import numba

    s, z, _, pf, ps = _random_case(rng, torch.float64)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        K.envsum(s, z, pf, ps, backend="numba")
        assert numba.get_num_threads() == 1
        assert torch.get_num_threads() == 1  # numba's OpenMP start-up must not reset it
        torch.set_num_threads(2)  # featsum: one private accumulator per thread, then summed
        e = torch.randn(z.shape[0], s.shape[1], z.shape[1], dtype=torch.float64)
        torch.testing.assert_close(
            K.featsum(e, s, pf, ps, backend="numba"), K.featsum(e, s, pf, ps, backend="torch")
        )
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------- input errors


def test_input_errors_name_the_problem() -> None:
    s = torch.randn(3, 2)
    z = torch.randn(4, 5)
    pf = torch.tensor([0, 1, 2])
    with pytest.raises(KernelInputError, match=r"outside \[0, 4\): min 0, max 7"):
        K.envsum(s, z, pf, torch.tensor([0, 1, 7]))
    with pytest.raises(KernelInputError, match="float32 or float64 operands of one dtype"):
        K.envsum(s, z.double(), pf, pf)
    with pytest.raises(KernelInputError, match="1-D integer tensor"):
        K.envsum(s, z, pf.float(), pf)
    with pytest.raises(KernelInputError, match="sense has 3 rows but there are 2 pairs"):
        K.envsum(s, z, pf[:2], pf[:2])
    with pytest.raises(KernelInputError, match="feat must be"):
        K.sensesum(torch.randn(4, 2, 5), torch.randn(4, 6), pf, pf)
    with pytest.raises(KernelInputError, match=r"pair_first must be a 1-D integer tensor"):
        K.envsum(torch.randn(2, 3), torch.randn(3, 4), pf[None, :2], pf[None, 1:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_warm_up_runs_every_op(backend: str) -> None:
    assert K.warm_up(backend) == backend
