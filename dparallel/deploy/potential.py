"""The whole potential as one torch module: positions + neighbour list → energy, forces, stress.

This is the module that ``dparallel export`` traces into ``potential.pt2`` (torch.export),
``potential_aoti.pt2`` (AOTInductor) and ``potential.ts`` (TorchScript); docs/training.md
("Deployment") documents the input contract. It is built from a (descriptor, HDNNP) pair
through public seams only: the descriptor's traceable graph form from the descriptor registry
(``DescriptorKind.graph``) and ``HDNNP.atomic_energies``, so any registered descriptor type
with a graph form exports.

A graph (its contract: :class:`~dparallel.descriptors.registry.DescriptorKind`) computes
the same numbers as the descriptor's ``compute`` (tested to 1e-10) from tensors only, every
data-dependent size produced by a tensor op, so ``make_fx``/``torch.export`` trace it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from ase.data import atomic_numbers
from torch import Tensor, nn

from dparallel.descriptors.registry import descriptor_graph
from dparallel.errors import TrainingError

if TYPE_CHECKING:
    from dparallel.nn import HDNNP

#: Positional inputs of the artifact, in order (shapes and units: :meth:`PotentialModule.forward`).
INPUT_NAMES = ("positions", "numbers", "cell", "pbc", "pair_first", "pair_second", "shifts")
#: Outputs of the artifact, in order.
OUTPUT_NAMES = ("energy", "forces", "stress", "energies")


class PotentialModule(nn.Module):
    """E, F = −∂E/∂r and σ = (1/V) ∂E/∂ε of one structure, by autograd inside the graph.

    ``descriptor``: the one the trained :class:`HDNNP` ``model`` was trained on (its elements
    must be among the descriptor's), of a registered type with a graph form; ``dtype``: the
    floating dtype of the inputs and outputs.
    """

    species_of: torch.Tensor  # (119,) atomic number → descriptor element index, -1 (buffer)

    def __init__(self, descriptor: Any, model: HDNNP, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.graph = descriptor_graph(descriptor)
        missing = [e for e in model.elements if e not in self.graph.elements]
        if missing:
            raise TrainingError(
                f"model elements {missing} are not among the descriptor's {self.graph.elements}"
            )
        self.model = model.to(dtype)
        self.dtype = dtype
        self.elements = list(model.elements)
        species = torch.full((119,), -1, dtype=torch.long)  # atomic number → descriptor index
        for e in self.elements:
            species[atomic_numbers[e]] = self.graph.elements.index(e)
        self.register_buffer("species_of", species, False)

    @property
    def cutoff(self) -> float:
        """Neighbour-list cutoff (Å): pairs at or beyond it are ignored."""
        return float(self.graph.r_cut)

    def forward(
        self,
        positions: Tensor,
        numbers: Tensor,
        cell: Tensor,
        pbc: Tensor,
        pair_first: Tensor,
        pair_second: Tensor,
        shifts: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Energy () eV, forces (N, 3) eV/Å, stress (3, 3) eV/Å³ and per-atom energies (N,)
        eV of one structure.

        ``positions`` (N, 3) Å; ``numbers`` (N,) int64, each one of the model's elements;
        ``cell`` (3, 3) Å, rows the cell vectors (zeros when not periodic); ``pbc`` (3,) bool
        (stress is NaN unless all are periodic); ``pair_first``, ``pair_second`` (P,) int64,
        the full neighbour list (i→j and j→i) in any order, cutoff ≥ :attr:`cutoff`;
        ``shifts`` (P, 3) image shifts S in ``positions``' dtype: r_ij = r_j − r_i + S·cell.
        """
        species = self.species_of.index_select(0, numbers)  # (N,)
        torch._assert_async((species >= 0).all(), "an atomic number is not among the model's")
        with torch.enable_grad():
            pos = positions.detach().requires_grad_(True)
            strain = torch.zeros(3, 3, dtype=positions.dtype, device=positions.device)
            strain.requires_grad_(True)
            deform = torch.eye(3, dtype=pos.dtype, device=pos.device) + strain
            pos_s, cell_s = pos @ deform, cell @ deform
            vectors = pos_s.index_select(0, pair_second) - pos_s.index_select(0, pair_first)
            vectors = vectors + shifts @ cell_s  # (P, 3) r_ij
            energies = graph_energies(
                self.graph, self.model, vectors, pair_first, pair_second, species
            )
            energy = energies.sum()
            grad_pos, grad_strain = torch.autograd.grad([energy], [pos, strain])
        volume = torch.linalg.det(cell).abs()
        periodic = pbc.all() & (volume > 1e-10)
        nan = grad_strain.new_zeros(()).div(0.0)  # not a literal: TorchScript can't parse `nan`
        stress = torch.where(periodic, grad_strain / volume, nan)
        return energy.detach(), -grad_pos, stress, energies.detach()


def graph_energies(
    graph: Any, model: HDNNP, vectors: Tensor, first: Tensor, second: Tensor, species: Tensor
) -> Tensor:
    """Per-atom energies (N,) eV of ``model`` on the descriptor ``graph``'s rows of each element.

    ``graph`` is a registered descriptor type's torch form (``DescriptorKind.graph``);
    ``vectors`` (P, 3) Å r_ij of pairs ``first`` → ``second`` (P,) int64, ``species`` (N,)
    int64 index into ``graph.elements``. Differentiable with respect to ``vectors``. In
    float64 whatever ``vectors``' dtype, as the model's reference energies (a float32 model's
    absolute energies would be rounded to eV for heavy elements of all-electron data).
    """
    source = graph(vectors, first, second, species)  # (N, width)
    rows, values = {}, {}
    for e in model.elements:
        k = graph.elements.index(e)
        rows[e] = torch.nonzero(species == k).squeeze(1)  # (n_e,)
        values[e] = source.index_select(0, rows[e]).index_select(1, graph.columns(e))
    atomic = model.atomic_energies(values)
    energies = source.new_zeros(
        species.shape[0], dtype=torch.promote_types(source.dtype, model.ref_energy.dtype)
    )
    for e, ei in atomic.items():
        energies = energies.index_add(0, rows[e], ei)
    return energies
