"""What training minimizes: the model's predictions on a batch and the loss they give.

:func:`predict_batch` turns a :class:`~dparallel.train.batch.Batch` into energies and
forces: from its descriptor values and ∂G/∂r, or, for a batch carrying its geometry
(``descriptor_source: computed``, :func:`predict_from_geometry`), from positions through
the descriptor's torch graph — the graph the deployed potential runs — and autograd.
:func:`loss` is the objective every optimizer uses (gradient descent back-propagates it;
the Kalman filter reports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dparallel.descriptors import forces_from_derivatives

if TYPE_CHECKING:
    from dparallel.nn import HDNNP
    from dparallel.train.batch import Batch, Geometry


def predict_batch(
    model: HDNNP, batch: Batch, forces: bool, create_graph: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Energies (S,) and, if ``forces``, forces (N, 3) from stored descriptors and derivatives.

    Forces use dE/dG by autograd and the stored ∂G/∂r (``forces_from_derivatives``);
    ``create_graph=True`` keeps the graph so a loss can be back-propagated (training);
    without it and without forces, the energies are computed under ``no_grad``.
    A batch with its ``geometry`` computes its descriptors from positions instead
    (:func:`predict_from_geometry`).
    """
    if batch.geometry is not None:
        return predict_from_geometry(model, batch, batch.geometry, forces, create_graph)
    features = batch.features or {}
    values = {e: r.values.detach().requires_grad_(forces) for e, r in features.items()}
    atom_index = {elem: r.atom_index for elem, r in features.items()}
    with torch.enable_grad() if forces or create_graph else torch.no_grad():
        energy = model(values, atom_index, batch.structure_index, batch.n_structures)
        if not forces:
            return energy, None
        keys = list(values)
        grads = torch.autograd.grad(
            energy.sum(), [values[k] for k in keys], create_graph=create_graph, allow_unused=True
        )
        dE_dG = {
            k: (g if g is not None else torch.zeros_like(values[k]))
            for k, g in zip(keys, grads, strict=True)
        }
        predicted = forces_from_derivatives(dE_dG, features, batch.n_atoms)
    return energy, predicted


def predict_from_geometry(
    model: HDNNP, batch: Batch, geometry: Geometry, forces: bool, create_graph: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Energies (S,) and, if ``forces``, forces (N, 3) of ``batch`` from its ``geometry``.

    Positions → pair vectors r_ij = r_j − r_i + S·cell → the descriptor graph → each
    element's columns → the HDNNP (which scales them) → energies; forces = −∂E/∂positions
    by autograd (``create_graph``: the force loss back-propagates through the double
    backward of graph and networks). Same contract as :func:`predict_batch`.
    """
    graph = geometry.graph
    with torch.enable_grad() if forces or create_graph else torch.no_grad():
        pos = geometry.positions.detach().requires_grad_(forces)
        vectors = (
            pos.index_select(0, geometry.pair_second)
            - pos.index_select(0, geometry.pair_first)
            + geometry.pair_offsets
        )  # (P, 3) r_ij
        source = graph(vectors, geometry.pair_first, geometry.pair_second, geometry.species)
        values = {
            elem: source.index_select(0, rows).index_select(1, graph.columns(elem))
            for elem, rows in geometry.element_rows.items()
        }  # elem → (n_e, F_e)
        energy = model(values, geometry.element_rows, batch.structure_index, batch.n_structures)
        if not forces:
            return energy, None
        if not energy.requires_grad:  # no atom of any element: no force either
            return energy, torch.zeros_like(pos)
        (grad,) = torch.autograd.grad(energy.sum(), [pos], create_graph=create_graph)
    return energy, -grad


def loss(
    energy: torch.Tensor, forces: torch.Tensor | None, batch: Batch, force_weight: float
) -> torch.Tensor:
    """MSE of energy per atom + force_weight · MSE of force components (NaN labels masked).

    ``energy`` (S,) eV and ``forces`` (N, 3) eV/Å as :func:`predict_batch` gives them; a
    scalar tensor (eV²/atom², plus force_weight · eV²/Å²).
    """
    ok = torch.isfinite(batch.energy)
    de = torch.where(ok, (energy - batch.energy) / batch.atom_counts, 0.0)
    out = _masked_mean_square(de, ok)
    if forces is not None and force_weight > 0:
        okf = torch.isfinite(batch.forces)
        out = out + force_weight * _masked_mean_square(
            torch.where(okf, forces - batch.forces, 0.0), okf
        )
    return out


def _masked_mean_square(diff: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """Mean of ``diff**2`` over the ``ok`` entries (``diff`` is 0 elsewhere), 0 if none.

    No host synchronisation (no boolean indexing, no ``any()``): a GPU step stays queued.
    """
    return (diff**2).sum() / ok.sum().clamp(min=1).to(diff.dtype)
