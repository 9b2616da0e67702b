"""The optimizer interface of the training loop, chosen once from the spec.

An :class:`Optimizer` makes one update per mini-batch (:meth:`~Optimizer.step`), follows
the epochs (its learning-rate schedule, a scheduled force weight) and saves and restores its
state for checkpoints (``optimizer`` and ``scheduler`` entries, as checkpoints always held
them). :func:`make_optimizer` builds the class that the one table of optimizers
(:data:`~dparallel.train.optimizer_kinds.OPTIMIZERS`, which the spec validates against)
gives for ``optimizer:``; the loop, the objective and the checkpoints only use the
interface (as hippynn's ``get_step_function`` and ``Controller``). Implementations:
:class:`GradientDescent` (:class:`Adam`, :class:`AdamW`, with a cosine or plateau schedule)
and :class:`KalmanUpdates` (n2p2's Kalman filter, :mod:`~dparallel.train.kalman`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from dparallel.train.kalman import KalmanFilter, kalman_step, make_kalman
from dparallel.train.objective import loss, predict_batch
from dparallel.train.optimizer_kinds import optimizer_kind

if TYPE_CHECKING:
    from collections.abc import Callable

    from dparallel.nn import HDNNP
    from dparallel.train.batch import Batch
    from dparallel.train.spec import TrainingSpec

#: energy (S,), forces (N, 3) or None, loss: what one update returns (before the update).
StepResult = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]


class Optimizer(ABC):
    """One training update per mini-batch, with its state and its epoch schedule."""

    #: The learning-rate schedule (a torch scheduler), if any.
    scheduler: Any = None

    def __init__(self, optimizer: torch.optim.Optimizer | KalmanFilter, spec: TrainingSpec) -> None:
        self.optimizer = optimizer
        self.spec = spec

    @classmethod
    @abstractmethod
    def build(cls, model: HDNNP, spec: TrainingSpec, n_train: int) -> Optimizer:
        """The optimizer of ``spec`` over ``model``'s parameters (``n_train`` structures
        per epoch)."""

    @property
    def needs_derivatives(self) -> bool:
        """Whether updates need the descriptors' dG/dr (the table's ``needs_derivatives``)."""
        return optimizer_kind(self.spec.optimizer).needs_derivatives

    @property
    def lr(self) -> float:
        """The learning rate of the epoch (1 for the Kalman filter)."""
        return float(self.optimizer.param_groups[0]["lr"])

    def begin_epoch(self) -> None:  # noqa: B027 - a hook, empty by default
        """Called before an epoch's first update."""

    @abstractmethod
    def step(self, model: HDNNP, batch: Batch, forces: bool) -> StepResult:
        """Update ``model`` from ``batch``; its energies, forces and loss before the update."""

    def end_epoch(self, monitor: float) -> None:  # noqa: B027 - a hook, empty by default
        """Called after an epoch with its monitored (validation) loss."""

    def monitor_rebased(self, best: float) -> None:
        """The best monitored loss so far, measured again on another validation set (a
        resumed run on a store with more structures): a plateau schedule compares with it."""
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.scheduler.best = best

    def columns(self) -> dict[str, float]:
        """Extra columns of the epoch's metrics row."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The state a checkpoint keeps: ``optimizer`` and ``scheduler``."""
        scheduler = self.scheduler.state_dict() if self.scheduler is not None else None
        return {"optimizer": self.optimizer.state_dict(), "scheduler": scheduler}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (a checkpoint's entries)."""
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
            self._resize_cosine()

    def _resize_cosine(self) -> None:
        """A cosine schedule restored for another number of epochs (``--resume --set
        epochs=…``) follows the cosine of the spec's length from the epoch reached, as a
        run of that length would have, instead of going past its old end and climbing
        back; with the same length nothing changes (a resumed run equals one never cut)."""
        cosine = self.scheduler
        if not isinstance(cosine, torch.optim.lr_scheduler.CosineAnnealingLR):
            return
        if cosine.T_max == self.spec.epochs:
            return
        cosine.T_max = self.spec.epochs
        progress = min(cosine.last_epoch, cosine.T_max) / cosine.T_max
        for group, base in zip(self.optimizer.param_groups, cosine.base_lrs, strict=True):
            group["lr"] = (
                cosine.eta_min + (base - cosine.eta_min) * (1 + math.cos(math.pi * progress)) / 2
            )
        cosine._last_lr = [group["lr"] for group in self.optimizer.param_groups]


class GradientDescent(Optimizer):
    """A torch optimizer (``torch_class``) on the loss, with the spec's learning-rate
    schedule."""

    torch_class: ClassVar[Callable[..., torch.optim.Optimizer]]
    optimizer: torch.optim.Optimizer

    @classmethod
    def build(cls, model: HDNNP, spec: TrainingSpec, n_train: int) -> Optimizer:
        """``torch_class`` with the spec's ``lr`` and ``weight_decay``."""
        return cls(
            cls.torch_class(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay), spec
        )

    def __init__(self, optimizer: torch.optim.Optimizer, spec: TrainingSpec) -> None:
        super().__init__(optimizer, spec)
        if spec.schedule == "cosine":
            self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
                optimizer, spec.epochs, eta_min=spec.lr_min
            )
        elif spec.schedule == "plateau":
            self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer, factor=spec.plateau_factor, patience=spec.plateau_patience,
                min_lr=spec.lr_min,
            )  # fmt: skip
        self.force_weight = spec.force_weight

    def begin_epoch(self) -> None:
        """Set the epoch's force weight from its learning rate (``force_weight_start``).

        With ``force_weight_start`` the weight follows the learning rate as in DeePMD-kit's
        loss prefactors: ``force_weight + (force_weight_start − force_weight) · lr /
        spec.lr``. The update steps use it; every reported loss (training ones too) uses
        ``force_weight`` (``reporting.Metrics``), so the monitored loss compares across epochs.
        """
        spec = self.spec
        if spec.force_weight_start is not None:
            start, end = spec.force_weight_start, spec.force_weight
            self.force_weight = end + (start - end) * self.lr / spec.lr

    def step(self, model: HDNNP, batch: Batch, forces: bool) -> StepResult:
        """One gradient step on the loss of ``batch``.

        Gradients are zeroed, not dropped: the network of an element without atoms in the
        batch gets a zero gradient whether or not the batch carries its (empty) table (a
        store's partition may lack it, a computed batch has none), so the optimizer steps
        every parameter alike and the trajectory does not depend on how data are stored.
        """
        self.optimizer.zero_grad(set_to_none=False)
        energy, predicted = predict_batch(model, batch, forces, create_graph=True)
        value = loss(energy, predicted, batch, self.force_weight)
        value.backward()
        for p in model.parameters():  # untouched before any batch had the element's atoms
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self.optimizer.step()
        return energy, predicted, value

    def end_epoch(self, monitor: float) -> None:
        """Step the schedule (a plateau schedule on ``monitor``)."""
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.scheduler.step(monitor)
        elif self.scheduler is not None:
            self.scheduler.step()

    def columns(self) -> dict[str, float]:
        """``force_weight`` when it is scheduled."""
        return {} if self.spec.force_weight_start is None else {"force_weight": self.force_weight}


class Adam(GradientDescent):
    """Adam (``optimizer: adam``; ``weight_decay`` as an L2 term)."""

    torch_class = torch.optim.Adam


class AdamW(GradientDescent):
    """AdamW (``optimizer: adamw``; decoupled ``weight_decay``)."""

    torch_class = torch.optim.AdamW


class KalmanUpdates(Optimizer):
    """One combined energy + force Kalman update per mini-batch; it anneals its own noise."""

    optimizer: KalmanFilter

    @classmethod
    def build(cls, model: HDNNP, spec: TrainingSpec, n_train: int) -> Optimizer:
        """n2p2's filter; one update per mini-batch, so the per-epoch τ's spread over them."""
        return cls(make_kalman(model, spec, math.ceil(n_train / spec.batch_size)), spec)

    def step(self, model: HDNNP, batch: Batch, forces: bool) -> StepResult:
        """One Kalman update (:func:`~dparallel.train.kalman.kalman_step`)."""
        return kalman_step(model, self.optimizer, batch, self.spec, forces)


def make_optimizer(model: HDNNP, spec: TrainingSpec, n_train: int) -> Optimizer:
    """The optimizer ``spec.optimizer`` names, over ``model``'s parameters (on its device).

    The class is the table's (:data:`~dparallel.train.optimizer_kinds.OPTIMIZERS`).
    ``n_train``: training structures per epoch (the Kalman filter spreads its per-epoch
    annealing over the epoch's updates).
    """
    optimizer: Optimizer = optimizer_kind(spec.optimizer).load().build(model, spec, n_train)
    return optimizer
