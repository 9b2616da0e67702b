"""Behler-Parrinello high-dimensional neural network potential (one MLP per element)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from dparallel.errors import TrainingError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["HDNNP", "scaling_from_statistics"]

_ACTIVATIONS = {"tanh": nn.Tanh, "silu": nn.SiLU, "softplus": nn.Softplus, "gelu": nn.GELU}


def scaling_from_statistics(stats: Mapping[str, Any], mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(shift, factor) per feature so that scaled G = (G − shift) · factor.

    ``stats`` holds n2p2 scaling.data fields (min, max, mean, sigma lists). Modes:
    ``center_sigma`` (n2p2 ``scalesigma`` without the [smin, smax] offset): (G − mean)/σ;
    ``minmax`` (n2p2 ``scale`` to [−1, 1]); ``center`` (G − mean); ``none``.
    Constant features (σ or max − min below 1e-12) get factor 1.
    """
    lo = np.asarray(stats["min"], np.float64)
    hi = np.asarray(stats["max"], np.float64)
    mean = np.asarray(stats["mean"], np.float64)
    sigma = np.asarray(stats["sigma"], np.float64)
    if mode == "center_sigma":
        return mean, 1.0 / np.where(sigma > 1e-12, sigma, 1.0)
    if mode == "minmax":
        width = hi - lo
        return 0.5 * (hi + lo), 2.0 / np.where(width > 1e-12, width, 1.0)
    if mode == "center":
        return mean, np.ones_like(mean)
    if mode == "none":
        return np.zeros_like(mean), np.ones_like(mean)
    raise TrainingError(f"unknown scaling mode {mode!r}")


class HDNNP(nn.Module):
    """Sum of per-element atomic energies E_i = ref_e + s · MLP_e((G_i − shift_e) · factor_e).

    Parameters
    ----------
    elements
        Chemical symbols, one network each.
    n_features
        Number of descriptor columns per element.
    hidden, activation
        Hidden layer sizes and activation of every network.
    """

    ref_energy: torch.Tensor  # (n_elements,) eV per atom (buffer)
    energy_scale: torch.Tensor  # () eV (buffer)
    nets: nn.ModuleDict

    def __init__(
        self,
        elements: Sequence[str],
        n_features: Mapping[str, int],
        hidden: Sequence[int] = (24, 24),
        activation: str = "tanh",
    ) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise TrainingError(f"activation must be one of {sorted(_ACTIVATIONS)}")
        self.elements = list(elements)
        self.n_features = {e: int(n_features[e]) for e in self.elements}
        self.hidden = [int(h) for h in hidden]
        self.activation = activation
        nets = {}
        for e in self.elements:
            layers: list[nn.Module] = []
            width = self.n_features[e]
            for h in self.hidden:
                layers += [nn.Linear(width, h), _ACTIVATIONS[activation]()]
                width = h
            layers.append(nn.Linear(width, 1))
            nets[e] = nn.Sequential(*layers)
            self.register_buffer(f"shift_{e}", torch.zeros(self.n_features[e]))
            self.register_buffer(f"factor_{e}", torch.ones(self.n_features[e]))
        self.nets = nn.ModuleDict(nets)
        self.register_buffer("ref_energy", torch.zeros(len(self.elements)))  # eV per atom
        self.register_buffer("energy_scale", torch.ones(()))  # eV

    def config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able): rebuild with ``HDNNP(**config)``."""
        return {
            "elements": self.elements,
            "n_features": self.n_features,
            "hidden": self.hidden,
            "activation": self.activation,
        }

    def set_scaling(self, element: str, shift: np.ndarray, factor: np.ndarray) -> None:
        """Set the descriptor scaling of ``element`` (G' = (G − shift) · factor)."""
        getattr(self, f"shift_{element}").copy_(torch.as_tensor(shift))
        getattr(self, f"factor_{element}").copy_(torch.as_tensor(factor))

    def atomic_energies(self, values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Energy of each atom, element → (n_e,) eV, from unscaled descriptors (n_e, F_e)."""
        out = {}
        for k, e in enumerate(self.elements):
            g = values.get(e)
            if g is None:
                continue
            x = (g - getattr(self, f"shift_{e}")) * getattr(self, f"factor_{e}")  # (n_e, F_e)
            out[e] = self.nets[e](x).squeeze(1) * self.energy_scale + self.ref_energy[k]
        return out

    def forward(
        self,
        values: Mapping[str, torch.Tensor],
        atom_index: Mapping[str, torch.Tensor],
        structure_index: torch.Tensor,
        n_structures: int,
    ) -> torch.Tensor:
        """Total energy per structure, (n_structures,) eV.

        Parameters
        ----------
        values
            element → (n_e, F_e) descriptors of that element's atoms.
        atom_index
            element → (n_e,) atom row of each descriptor row.
        structure_index
            (N,) structure of each atom row.
        n_structures
            Number of structures S.
        """
        energies = None
        for e, ei in self.atomic_energies(values).items():
            if energies is None:
                energies = ei.new_zeros(n_structures)
            energies = energies.index_add(0, structure_index.index_select(0, atom_index[e]), ei)
        if energies is None:
            return self.ref_energy.new_zeros(n_structures)
        return energies
