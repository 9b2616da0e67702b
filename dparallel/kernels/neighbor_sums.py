"""HIP-NN neighbor sums ``envsum`` / ``sensesum`` / ``featsum`` with autograd and backends.

With P pairs (``pair_first`` = centre i, ``pair_second`` = neighbour j), the three ops are
∂T/∂E, ∂T/∂s and ∂T/∂z of T(E, s, z) = Σ_p Σ_{ν,a} E[first_p, ν, a] · s[p, ν] · z[second_p, a],
so each op's backward is made of the other two (double backward in every backend).
Arguments, shapes and meaning are hippynn's; each op's ``backend=`` overrides the global
choice (:func:`set_backend`, or ``DPARALLEL_KERNEL_BACKEND``) for the call and its
derivatives. Backends (:data:`BACKENDS`) and ``"auto"``: docs/kernels.md.
"""

from __future__ import annotations

import importlib
import logging
import os
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from dparallel.errors import BackendUnavailableError, KernelInputError
from dparallel.kernels._backends.availability import numba_import_error, unknown_backend
from dparallel.kernels._backends.triton_env import interpreting

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

__all__ = [
    "BACKENDS",
    "ENV_VAR",
    "available_backends",
    "envsum",
    "featsum",
    "get_backend",
    "sensesum",
    "set_backend",
    "use_backend",
    "warm_up",
]

logger = logging.getLogger(__name__)

#: Environment variable read on first use when :func:`set_backend` was not called.
ENV_VAR = "DPARALLEL_KERNEL_BACKEND"

#: Backend name → (implementation module, CPU only?, one-line description).
BACKENDS: dict[str, tuple[str, bool, str]] = {
    "torch": ("dparallel.kernels._backends.torch_ref", False, "dense PyTorch reference"),
    "chunked": ("dparallel.kernels._backends.chunked", False, "blocked PyTorch, lean memory"),
    "numba": ("dparallel.kernels._backends.numba_cpu", True, "numba CPU kernels, lean memory"),
    "triton": ("dparallel.kernels._backends.triton_sums", False, "Triton GPU kernels"),
}
_AUTO_ORDER = ("numba", "chunked")

_modules: dict[str, ModuleType] = {}
_import_errors: dict[str, str] = {}
_selected: str | None = None  # "auto" or a concrete name; None = not yet read from ENV_VAR
_fallback_logged = False


def _load(name: str) -> ModuleType | None:
    """Import a backend's module once; remember why it failed."""
    if name in _modules:
        return _modules[name]
    if name in _import_errors:
        return None
    if name == "numba" and (reason := numba_import_error()) is not None:
        _import_errors[name] = reason  # the one numba probe every switch asks
        return None
    try:
        module = importlib.import_module(BACKENDS[name][0])
    except ImportError as exc:  # e.g. numba not installed
        _import_errors[name] = f"{type(exc).__name__}: {exc}"
        return None
    _modules[name] = module
    return module


def available_backends() -> list[str]:
    """Names of the backends that can run here, in :data:`BACKENDS` order (no ``"auto"``)."""
    return [name for name in BACKENDS if _load(name) is not None]


def _check_name(name: str, source: str) -> str:
    """Validate a backend name and that it imports; return it lower-cased."""
    key = name.strip().lower()
    if key == "auto":
        return key
    if key not in BACKENDS:
        raise unknown_backend("kernel", name, ("auto", *BACKENDS), source)
    if _load(key) is None:
        raise BackendUnavailableError(
            f"kernel backend {key!r} (from {source}) is unavailable: {_import_errors[key]}. "
            f"Install its dependency or choose one of {available_backends()} or 'auto'."
        )
    return key


def set_backend(name: str) -> None:
    """Choose the backend of :func:`envsum`, :func:`sensesum`, :func:`featsum`: ``"auto"`` or
    a :data:`BACKENDS` name (case-insensitive); an unknown or unavailable one is a
    :class:`BackendUnavailableError`."""
    global _selected
    _selected = _check_name(name, "set_backend")


def _selection() -> str:
    """The selected name, reading ENV_VAR on first use."""
    global _selected
    if _selected is None:
        value = os.environ.get(ENV_VAR, "auto") or "auto"
        _selected = _check_name(value, f"environment variable {ENV_VAR}")
    return _selected


def _resolve(name: str | None, device: torch.device) -> str:
    """Concrete backend for tensors on ``device`` (``name`` overrides the global choice)."""
    global _fallback_logged
    choice = _selection() if name is None else _check_name(name, "backend= argument")
    if choice != "auto":
        if BACKENDS[choice][1] and device.type != "cpu":
            raise BackendUnavailableError(
                f"kernel backend {choice!r} runs on CPU only but the tensors are on "
                f"{device}; use set_backend('chunked') or 'auto'"
            )
        if choice == "triton" and device.type == "cpu" and not interpreting():
            raise BackendUnavailableError(
                "kernel backend 'triton' runs on CUDA tensors (on CPU ones only in Triton's "
                "interpreter, TRITON_INTERPRET=1) but the tensors are on cpu; move them to the "
                "GPU or use set_backend('chunked') or 'auto'"
            )
        return choice
    for candidate in _AUTO_ORDER:
        if BACKENDS[candidate][1] and device.type != "cpu":
            continue
        if _load(candidate) is not None:
            if candidate != _AUTO_ORDER[0] and not _fallback_logged:
                _fallback_logged = True
                logger.warning(
                    "kernel backend 'auto': %r unavailable (%s); falling back to %r",
                    _AUTO_ORDER[0],
                    _import_errors.get(_AUTO_ORDER[0], f"tensors on {device}"),
                    candidate,
                )
            return candidate
    return "torch"  # unreachable in practice: 'chunked' needs only torch


def get_backend() -> str:
    """The concrete backend that CPU tensors use now (``"auto"`` resolved)."""
    return _resolve(None, torch.device("cpu"))


@contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Context manager that selects a backend temporarily (restores the previous choice)."""
    global _selected
    previous = _selection()
    set_backend(name)
    try:
        yield
    finally:
        _selected = previous


# ---------------------------------------------------------------- validation


def _index(t: Tensor, what: str, n_atoms: int) -> Tensor:
    """Check an index tensor: 1-D integer, in [0, n_atoms); return it as int64."""
    if t.dim() != 1 or t.dtype.is_floating_point or t.dtype == torch.bool:
        raise KernelInputError(
            f"{what} must be a 1-D integer tensor (int64), got shape {tuple(t.shape)} "
            f"and dtype {t.dtype}"
        )
    t = t.to(torch.int64)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n_atoms):
        raise KernelInputError(
            f"{what} holds atom indices outside [0, {n_atoms}): "
            f"min {int(t.min())}, max {int(t.max())}"
        )
    return t


def _check(
    op: str,
    pair_first: Tensor,
    pair_second: Tensor,
    n_atoms: int,
    n_pairs: int | None,
    *floats: tuple[str, Tensor, int],
) -> tuple[Tensor, Tensor]:
    """Validate float operands (name, tensor, ndim) and the pair indices of one op."""
    dtype = floats[0][1].dtype
    for what, t, ndim in floats:
        if t.dim() != ndim:
            raise KernelInputError(f"{op}: {what} must be {ndim}-D, got shape {tuple(t.shape)}")
        if t.dtype not in (torch.float32, torch.float64) or t.dtype != dtype:
            raise KernelInputError(
                f"{op}: float32 or float64 operands of one dtype expected, got "
                + ", ".join(f"{w} {x.dtype}" for w, x, _ in floats)
            )
    if pair_first.shape != pair_second.shape:
        raise KernelInputError(
            f"{op}: pair_first {tuple(pair_first.shape)} and pair_second "
            f"{tuple(pair_second.shape)} differ in shape"
        )
    first = _index(pair_first, f"{op}: pair_first", n_atoms)
    second = _index(pair_second, f"{op}: pair_second", n_atoms)
    if n_pairs is not None and first.shape[0] != n_pairs:
        raise KernelInputError(
            f"{op}: sense has {n_pairs} rows but there are {first.shape[0]} pairs"
        )
    return first, second


# ---------------------------------------------------------------- autograd wiring


class _PairOp(torch.autograd.Function):
    """One of the three ops on inputs ``(a, b)``; its backward is made of the other two.

    A subclass names its kernel (``op``), the shape of its result with no pair
    (``empty``) and, per input, the op and argument order giving that input's gradient
    (``grads``: ``("sense", "grad", "b")`` = sensesum(grad, b)).
    """

    op: str
    grads: tuple[tuple[str, str, str], tuple[str, str, str]]

    @staticmethod
    def empty(a: Tensor, b: Tensor, n_pairs: int) -> Tensor:
        raise NotImplementedError

    @classmethod
    def forward(cls, ctx: Any, name: str, a: Tensor, b: Tensor, pf: Tensor, ps: Tensor) -> Tensor:
        ctx.save_for_backward(a, b, pf, ps)
        ctx.backend = name
        if pf.shape[0] == 0 or a.numel() == 0 or b.numel() == 0:  # a sum of nothing
            return cls.empty(a, b, pf.shape[0])
        return getattr(_modules[name], cls.op)(a, b, pf, ps)  # loaded by _resolve

    @classmethod
    def backward(cls, ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        a, b, pf, ps = ctx.saved_tensors
        given = {"a": a, "b": b, "grad": grad}
        out: list[Tensor | None] = [None, None, None, None, None]
        for k, (op, first, second) in enumerate(cls.grads):
            if ctx.needs_input_grad[k + 1]:
                out[k + 1] = _OPS[op].apply(ctx.backend, given[first], given[second], pf, ps)
        return tuple(out)


class _EnvSum(_PairOp):  # (sense, feat) → (N, ν, F)
    op, grads = "envsum", (("sense", "grad", "b"), ("feat", "grad", "a"))

    @staticmethod
    def empty(a: Tensor, b: Tensor, n_pairs: int) -> Tensor:
        return b.new_zeros((b.shape[0], a.shape[1], b.shape[1]))


class _SenseSum(_PairOp):  # (env, feat) → (P, ν)
    op, grads = "sensesum", (("env", "grad", "b"), ("feat", "a", "grad"))

    @staticmethod
    def empty(a: Tensor, b: Tensor, n_pairs: int) -> Tensor:
        return a.new_zeros((n_pairs, a.shape[1]))


class _FeatSum(_PairOp):  # (env, sense) → (N, F)
    op, grads = "featsum", (("env", "b", "grad"), ("sense", "a", "grad"))

    @staticmethod
    def empty(a: Tensor, b: Tensor, n_pairs: int) -> Tensor:
        return a.new_zeros((a.shape[0], a.shape[2]))


_OPS: dict[str, type[_PairOp]] = {"env": _EnvSum, "sense": _SenseSum, "feat": _FeatSum}


# ---------------------------------------------------------------- public ops


def envsum(
    sense: Tensor,
    feat: Tensor,
    pair_first: Tensor,
    pair_second: Tensor,
    *,
    backend: str | None = None,
) -> Tensor:
    """Environment sum: env[i,ν,a] = Σ_{p: first_p=i} sense[p,ν]·feat[second_p,a].

    Returns (N, ν, F); rows of atoms without pairs are zero.
    """
    pf, ps = _check(
        "envsum", pair_first, pair_second, feat.shape[0] if feat.dim() == 2 else 0,
        sense.shape[0] if sense.dim() == 2 else None, ("sense", sense, 2), ("feat", feat, 2),
    )  # fmt: skip
    return _EnvSum.apply(_resolve(backend, feat.device), sense, feat, pf, ps)


def sensesum(
    env: Tensor,
    feat: Tensor,
    pair_first: Tensor,
    pair_second: Tensor,
    *,
    backend: str | None = None,
) -> Tensor:
    """Sensitivity sum: sense[p,ν] = Σ_a env[first_p,ν,a]·feat[second_p,a].

    Returns (P, ν).
    """
    n_atoms = env.shape[0] if env.dim() == 3 else 0
    pf, ps = _check(
        "sensesum", pair_first, pair_second, n_atoms, None, ("env", env, 3), ("feat", feat, 2)
    )
    if feat.shape != (n_atoms, env.shape[2]):
        raise KernelInputError(
            f"sensesum: feat must be (N, F) = {(n_atoms, env.shape[2])} to match env "
            f"{tuple(env.shape)}, got {tuple(feat.shape)}"
        )
    return _SenseSum.apply(_resolve(backend, env.device), env, feat, pf, ps)


def featsum(
    env: Tensor,
    sense: Tensor,
    pair_first: Tensor,
    pair_second: Tensor,
    *,
    backend: str | None = None,
) -> Tensor:
    """Feature sum: feat[j,a] = Σ_{p: second_p=j} Σ_ν sense[p,ν]·env[first_p,ν,a].

    Returns (N, F); rows of atoms that are nobody's neighbour are zero.
    """
    n_atoms = env.shape[0] if env.dim() == 3 else 0
    pf, ps = _check(
        "featsum", pair_first, pair_second, n_atoms,
        sense.shape[0] if sense.dim() == 2 else None, ("env", env, 3), ("sense", sense, 2),
    )  # fmt: skip
    if sense.shape[1] != env.shape[1]:
        raise KernelInputError(
            f"featsum: sense has {sense.shape[1]} sensitivities but env has {env.shape[1]}"
        )
    return _FeatSum.apply(_resolve(backend, env.device), env, sense, pf, ps)


def warm_up(
    backend: str | None = None,
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64),
) -> str:
    """Run all three ops and their derivatives once on a tiny problem, so that compiling
    the backend's kernels (or loading them from disk) is not the first real task's cost;
    returns the backend used."""
    name = _resolve(backend, torch.device("cpu"))
    pf = torch.tensor([0, 0, 1, 2, 2, 2], dtype=torch.int64)
    ps = torch.tensor([1, 2, 0, 0, 1, 1], dtype=torch.int64)
    for dtype in dtypes:
        s = torch.ones(6, 2, dtype=dtype, requires_grad=True)
        z = torch.ones(3, 4, dtype=dtype, requires_grad=True)
        env = envsum(s, z, pf, ps, backend=name)
        (g_s,) = torch.autograd.grad(env.sum(), s, create_graph=True)
        g_s.sum().backward()
    return name
