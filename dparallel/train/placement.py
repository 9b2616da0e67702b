"""Where training tensors live: the one place the model and the batches are placed.

Today that is the training dtype on the CPU. Training on another device (issue 22) changes
this module only: :meth:`Placement.model` moves the network (the optimizer, built after
it, and a resumed optimizer state, loaded into it, follow its parameters) and
:meth:`Placement.batches` yields every mini-batch, for training and for evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from dparallel.train.data import iterate_batches

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dparallel.nn import HDNNP
    from dparallel.train.data import Batch, PartitionReader
    from dparallel.train.spec import TrainingSpec

__all__ = ["Placement"]


@dataclass(frozen=True)
class Placement:
    """The dtype (and, later, the device) of a training run's model and batches."""

    dtype: torch.dtype

    @classmethod
    def of(cls, spec: TrainingSpec) -> Placement:
        """The placement ``spec`` asks for (``spec.dtype``)."""
        return cls(torch.float64 if spec.dtype == "float64" else torch.float32)

    def model(self, model: HDNNP) -> HDNNP:
        """``model`` in this placement (before an optimizer is built on its parameters)."""
        return model.to(self.dtype)

    def batches(
        self,
        reader: PartitionReader,
        split: str,
        spec: TrainingSpec,
        *,
        epoch: int | None = None,
    ) -> Iterator[Batch]:
        """Mini-batches of ``split``: shuffled for ``epoch`` (training) or in order (``None``).

        Evaluation streams batches of at least 64 structures, unshuffled.
        """
        if epoch is None:
            return iterate_batches(
                reader,
                split,
                max(64, spec.batch_size),
                shuffle=False,
                prefetch=spec.prefetch,
                dtype=self.dtype,
            )
        return iterate_batches(
            reader,
            split,
            spec.batch_size,
            shuffle=True,
            seed=spec.seed,
            epoch=epoch,
            shuffle_buffer=spec.shuffle_buffer,
            prefetch=spec.prefetch,
            dtype=self.dtype,
        )
