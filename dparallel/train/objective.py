"""What training minimizes: the model's predictions on a batch and the loss they give.

:func:`predict_batch` turns a :class:`~dparallel.train.data.Batch` of stored descriptors
and ∂G/∂r into energies and forces; :func:`loss` is the objective both optimizers use
(gradient descent back-propagates it; the Kalman filter reports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dparallel.descriptors import forces_from_derivatives
from dparallel.train.computed import predict_from_structures
from dparallel.train.structure_data import ComputedBatch

if TYPE_CHECKING:
    from dparallel.nn import HDNNP
    from dparallel.train.data import Batch
    from dparallel.train.spec import TrainingSpec

__all__ = ["loss", "predict_batch", "scheduled_force_weight"]


def predict_batch(
    model: HDNNP, batch: Batch, forces: bool, create_graph: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Energies (S,) and, if ``forces``, forces (N, 3) from stored descriptors and derivatives.

    Forces use dE/dG by autograd and the stored ∂G/∂r (``forces_from_derivatives``);
    ``create_graph=True`` keeps the graph so a loss can be back-propagated (training);
    without it and without forces, the energies are computed under ``no_grad``.
    A :class:`ComputedBatch` (``descriptor_source: computed``) computes its descriptors from
    positions instead (:func:`~dparallel.train.computed.predict_from_structures`).
    """
    if isinstance(batch, ComputedBatch):
        return predict_from_structures(model, batch, forces, create_graph)
    values = {}
    for e, res in batch.features.items():
        v = res.values
        values[e] = v.detach().requires_grad_(True) if forces else v
    atom_index = {e: r.atom_index for e, r in batch.features.items()}
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
        f = forces_from_derivatives(dE_dG, batch.features, batch.n_atoms)
    return energy, f


def loss(
    energy: torch.Tensor, f: torch.Tensor | None, batch: Batch, force_weight: float
) -> torch.Tensor:
    """MSE of energy per atom + force_weight · MSE of force components (NaN labels masked).

    ``energy`` (S,) eV and ``f`` (N, 3) eV/Å as :func:`predict_batch` gives them; a
    scalar tensor (eV²/atom², plus force_weight · eV²/Å²).
    """
    de = (energy - batch.energy) / batch.atom_counts
    ok = torch.isfinite(batch.energy)
    out = (de[ok] ** 2).mean() if bool(ok.any()) else energy.sum() * 0.0
    if f is not None and force_weight > 0:
        okf = torch.isfinite(batch.forces)
        if bool(okf.any()):
            out = out + force_weight * ((f - batch.forces)[okf] ** 2).mean()
    return out


def scheduled_force_weight(spec: TrainingSpec, lr: float) -> float:
    """The force weight of an epoch trained at learning rate ``lr`` (first-order optimizers).

    With ``force_weight_start`` set, the weight follows the learning rate as in DeePMD-kit's
    loss prefactors: ``force_weight + (force_weight_start − force_weight) · lr / spec.lr``,
    so it starts at ``force_weight_start`` and approaches ``force_weight`` as a cosine or
    plateau schedule lowers the rate. Otherwise (and for the Kalman filter) ``force_weight``.
    Validation and test losses always use ``force_weight``, so the monitored loss is
    comparable across epochs.
    """
    if spec.force_weight_start is None or spec.optimizer == "kalman":
        return spec.force_weight
    return spec.force_weight + (spec.force_weight_start - spec.force_weight) * lr / spec.lr
