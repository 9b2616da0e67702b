"""The network as n2p2's: activations, per-layer activations, normalize_nodes, scaling types."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dparallel.n2p2 import ACTIVATION_CODES
from dparallel.nn import ACTIVATIONS, HDNNP, make_activation, scaling_parameters


def _n2p2_activation(code: str, x: float) -> float:
    """Independent transcription of NeuralNetwork::propagateLayer (value)."""
    if code == "s":
        return 1.0 if x > 35 else 0.0 if x < -35 else 1 / (1 + math.exp(-x))
    if code == "p":
        return x if x > 35 else 0.0 if x < -35 else math.log(1 + math.exp(x))
    return {
        "l": lambda: x,
        "t": lambda: math.tanh(x),
        "r": lambda: x if x > 0 else 0.0,
        "g": lambda: math.exp(-0.5 * x * x),
        "c": lambda: math.cos(x),
        "S": lambda: 1 - 1 / (1 + math.exp(-x)) if x > -700 else 1.0,
        "e": lambda: math.exp(-x),
        "h": lambda: x * x,
    }[code]()


CODES = ACTIVATION_CODES  # n2p2 code → dparallel name


@pytest.mark.parametrize("code", sorted(CODES))
def test_activations_are_n2p2s(code: str) -> None:
    x = torch.tensor([-800.0, -36.0, -34.9, -3.0, -0.2, 0.0, 0.4, 2.5, 34.9, 36.0, 60.0],
                     dtype=torch.float64, requires_grad=True)  # fmt: skip
    if code in ("e", "h", "g", "c"):
        x = x.detach()[2:-3].requires_grad_(True)  # exp(800) overflows in n2p2 as well
    y = make_activation(CODES[code])(x)
    expect = [_n2p2_activation(code, v) for v in x.detach().tolist()]
    np.testing.assert_allclose(y.detach().numpy(), expect, rtol=1e-14, atol=1e-300)
    (g,) = torch.autograd.grad(y.sum(), x)
    assert torch.isfinite(g).all()
    h = 1e-6
    inner = ((x.abs() < 30) & (x != 0)).detach()  # relu has a kink at 0
    xs = x.detach()[inner]
    fd = [
        (_n2p2_activation(code, v + h) - _n2p2_activation(code, v - h)) / (2 * h)
        for v in xs.tolist()
    ]
    np.testing.assert_allclose(g[inner].numpy(), fd, rtol=1e-6, atol=1e-8)


def test_per_layer_activations_and_normalize_nodes() -> None:
    """Per element and per layer, and n2p2's pre-activation / fan-in."""
    model = HDNNP(
        ["H", "O"],
        {"H": 3, "O": 2},
        hidden={"H": [4], "O": [2, 3]},
        activations={"H": ["cos", "harmonic"], "O": ["relu", "logistic", "identity"]},
        normalize_nodes=True,
    ).double()
    x = torch.randn(5, 3, dtype=torch.float64)
    lin = [m for m in model.nets["H"] if isinstance(m, torch.nn.Linear)]
    h = torch.cos((x @ lin[0].weight.T + lin[0].bias) / 3)
    expect = ((h @ lin[1].weight.T + lin[1].bias) / 4) ** 2
    got = model.atomic_energies({"H": x})["H"]
    np.testing.assert_allclose(got.detach().numpy(), expect.squeeze(1).detach().numpy(), rtol=1e-14)
    rebuilt = HDNNP(**model.config()).double()
    rebuilt.load_state_dict(model.state_dict())
    torch.testing.assert_close(rebuilt.atomic_energies({"H": x})["H"], got)


def test_old_model_configs_and_state_dicts_still_load() -> None:
    """Configs without the new keys build the same modules (same state_dict keys)."""
    old = {"elements": ["Cu"], "n_features": {"Cu": 4}, "hidden": [8, 8], "activation": "tanh"}
    model = HDNNP(**old)
    assert list(model.state_dict()) == [
        "shift_Cu", "factor_Cu", "ref_energy", "energy_scale",
        "nets.Cu.0.weight", "nets.Cu.0.bias", "nets.Cu.2.weight", "nets.Cu.2.bias",
        "nets.Cu.4.weight", "nets.Cu.4.bias",
    ]  # fmt: skip
    assert model.config() == old and model.feature_offset == 0.0
    assert set(ACTIVATIONS) >= {"tanh", "silu", "softplus", "gelu"}


def test_n2p2_scaling_types_use_n2p2s_operations() -> None:
    rng = np.random.default_rng(1)
    lo = rng.normal(size=5)
    stats = {"min": lo, "max": lo + rng.uniform(0.5, 2, 5), "mean": lo + 0.3, "sigma": lo * 0 + 0.7}
    g = rng.normal(size=(4, 5))
    smin, smax = -0.5, 2.0
    width = stats["max"] - stats["min"]
    for mode, n2p2 in {
        "scale": lambda v: smin + (smax - smin) / width * (v - stats["min"]),
        "scalecenter": lambda v: smin + (smax - smin) / width * (v - stats["mean"]),
        "scalesigma": lambda v: smin + (smax - smin) / stats["sigma"] * (v - stats["mean"]),
        "center": lambda v: v - stats["mean"],
        "none": lambda v: v,
    }.items():  # fmt: skip
        shift, factor, offset = scaling_parameters(stats, mode, smin, smax)
        np.testing.assert_array_equal((g - shift) * factor + offset, n2p2(g))  # bitwise


def test_a_model_built_from_its_state_leaves_the_callers_random_numbers_alone() -> None:
    """Loading a model (load_model, load_deployed, the ASE calculator, evaluate, export)
    drew the layers' random initial weights from torch's global generator before replacing
    them: a notebook's torch.rand after it gave other numbers than without it."""
    original = HDNNP(["H", "O"], {"H": 3, "O": 4}, hidden=(5, 5))
    torch.manual_seed(11)
    before = torch.get_rng_state()
    expected = torch.rand(4)
    torch.set_rng_state(before)
    loaded = HDNNP.from_state(original.config(), original.state_dict())
    assert torch.equal(torch.rand(4), expected)
    for k, v in original.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k


def test_a_constant_feature_of_an_old_store_is_not_scaled_by_its_rounding() -> None:
    """Stores featurized before Σx² was exact recorded a constant feature's σ as ~1e-8·|x|
    (its min and max were always exact): center_sigma scaled it by ~1e9; now by 1."""
    import numpy as np

    from dparallel.nn.model import scaling_parameters

    x = np.full(10, 0.1)
    rounded_sigma = float(np.sqrt((np.sum(x * x) - np.sum(x) ** 2 / 10) / 9))  # the old way
    stats = {
        "min": [0.1, 0.0],
        "max": [0.1, 2.0],
        "mean": [0.1, 1.0],
        "sigma": [rounded_sigma, 0.5],
    }
    _, factor, _ = scaling_parameters(stats, "center_sigma")
    assert factor.tolist() == [1.0, 2.0]
