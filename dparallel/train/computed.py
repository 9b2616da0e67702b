"""Energies and forces from positions: descriptors computed per mini-batch, on its device.

The path of ``descriptor_source: computed`` (docs/training.md): positions → pair vectors
r_ij = r_j − r_i + S·cell → the descriptor's torch graph (the one the deployed potential
runs, :class:`~dparallel.descriptors.acsf_graph.ACSFGraph` for ACSF) → each element's
feature columns → the HDNNP (which scales them) → energies, and forces = −∂E/∂positions by
autograd. With ``create_graph=True`` the force loss back-propagates through the double
backward of the descriptor graph and the networks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from dparallel.nn import HDNNP
    from dparallel.train.structure_data import ComputedBatch

__all__ = ["predict_from_structures"]


def predict_from_structures(
    model: HDNNP, batch: ComputedBatch, forces: bool, create_graph: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Energies (S,) and, if ``forces``, forces (N, 3) of ``batch`` from its positions.

    Same contract as :func:`dparallel.train.objective.predict_batch`; the batch's tensors
    and the descriptor graph follow the model's device.
    """
    device = model.ref_energy.device
    if batch.positions.device != device:
        batch = batch.to(device)
    graph = batch.graph
    if graph is None:
        raise ValueError("a ComputedBatch needs its descriptor graph")
    with torch.enable_grad() if forces or create_graph else torch.no_grad():
        pos = batch.positions.detach().requires_grad_(forces)
        vectors = (
            pos.index_select(0, batch.pair_second)
            - pos.index_select(0, batch.pair_first)
            + batch.pair_offsets
        )  # (P, 3) r_ij
        source = graph(vectors, batch.pair_first, batch.pair_second, batch.species)  # (N, W)
        values = {
            e: source.index_select(0, rows).index_select(1, graph.columns(e))
            for e, rows in batch.element_rows.items()
        }
        energy = model(values, batch.element_rows, batch.structure_index, batch.n_structures)
        if not forces:
            return energy, None
        if not energy.requires_grad:  # no atom of any element: no force either
            return energy, torch.zeros_like(pos)
        (grad,) = torch.autograd.grad(energy.sum(), [pos], create_graph=create_graph)
    return energy, -grad
