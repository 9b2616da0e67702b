"""The epoch callback that sends a training run's metrics to the dashboard's training page.

Training does not know the dashboard: the caller (``dparallel train``, ``dparallel run``)
passes :func:`epoch_publisher` among its callbacks to :func:`dparallel.train.train`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from dparallel.dashboard.events import publish_train_metrics

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["epoch_publisher", "publish_epoch"]

_SPLITS: tuple[Literal["train", "validation"], ...] = ("train", "validation")


def publish_epoch(run: str, row: Mapping[str, Any]) -> None:
    """Send an epoch's metrics row, one event per split with a finite loss.

    A no-op without a cluster (see :func:`~dparallel.dashboard.events.publish_train_metrics`).
    """
    for split in _SPLITS:
        loss = row.get(f"{split}_loss")
        if loss is None or not math.isfinite(loss):
            continue
        publish_train_metrics(
            run,
            int(row["epoch"]),
            split,
            float(loss),
            row.get(f"{split}_energy_rmse"),
            row.get(f"{split}_force_rmse"),
            data_wait_fraction=row.get("data_wait_fraction") if split == "train" else None,
        )


def epoch_publisher(run: str) -> Callable[[Mapping[str, Any]], None]:
    """An epoch callback publishing each row under the name ``run``."""

    def publish(row: Mapping[str, Any]) -> None:
        publish_epoch(run, row)

    return publish
