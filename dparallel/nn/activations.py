"""Activation functions of the atomic networks, by name (pure torch, exportable).

n2p2's ten activations (``libnnp/NeuralNetwork.cpp``, codes in brackets) are reproduced
exactly, thresholds included, so imported n2p2 potentials give n2p2's numbers:

=================  ====  =======================================================
name               code  f(x)
=================  ====  =======================================================
``identity``       l     x
``tanh``           t     tanh x
``logistic``       s     1/(1 + e^−x); 1 above 35, 0 below −35
``softplus_n2p2``  p     ln(1 + e^x); x above 35, 0 below −35
``relu``           r     max(x, 0)
``gaussian``       g     exp(−x²/2)
``cos``            c     cos x
``revlogistic``    S     1 − 1/(1 + e^−x)
``exp``            e     exp(−x)
``harmonic``       h     x²
=================  ====  =======================================================

``softplus`` (torch's, linear above 20), ``silu`` and ``gelu`` have no n2p2 counterpart.
"""

from __future__ import annotations

import torch
from torch import nn

_EXP_LIMIT = 35.0  # n2p2's EXP_LIMIT


class _Logistic(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = 1.0 / (1.0 + torch.exp(-torch.clamp(x, -_EXP_LIMIT, _EXP_LIMIT)))
        s = torch.where(x > _EXP_LIMIT, torch.ones_like(x), s)
        return torch.where(x < -_EXP_LIMIT, torch.zeros_like(x), s)


class _SoftplusN2p2(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = torch.clamp(x, -_EXP_LIMIT, _EXP_LIMIT)  # no overflow in the unused branch
        s = torch.log(1.0 + torch.exp(inner))
        s = torch.where(x > _EXP_LIMIT, x, s)
        return torch.where(x < -_EXP_LIMIT, torch.zeros_like(x), s)


class _Gaussian(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(-0.5 * x * x)


class _Cos(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cos(x)


class _RevLogistic(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # exp(700) is finite: no inf·0 = NaN in the gradient, same value (1.0 exactly beyond)
        return 1.0 - 1.0 / (1.0 + torch.exp(-torch.clamp(x, -700.0, 700.0)))


class _Exp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(-x)


class _Harmonic(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x


#: n2p2's activations (which n2p2 evaluates identically): name → module class.
_N2P2: dict[str, type[nn.Module]] = {
    "identity": nn.Identity,
    "tanh": nn.Tanh,
    "logistic": _Logistic,
    "softplus_n2p2": _SoftplusN2p2,
    "relu": nn.ReLU,
    "gaussian": _Gaussian,
    "cos": _Cos,
    "revlogistic": _RevLogistic,
    "exp": _Exp,
    "harmonic": _Harmonic,
}
#: Name → module class of every activation an HDNNP layer may use.
ACTIVATIONS: dict[str, type[nn.Module]] = {
    **_N2P2,
    "softplus": nn.Softplus,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
}
#: Activations n2p2 can evaluate (identically).
N2P2_EXPRESSIBLE = frozenset(_N2P2)


def make_activation(name: str) -> nn.Module:
    """A fresh module for activation ``name`` (see :data:`ACTIVATIONS`)."""
    return ACTIVATIONS[name]()
