"""Event payloads that featurization and training publish for the dashboard.

Events travel through ``distributed``'s ``log_event`` (Pub/Sub is gone) on two topics.
Every payload is a flat, msgpack-serialisable ``dict``:

``dparallel-progress`` (:data:`TOPIC_PROGRESS`)
    ``{"kind": "start", "run": str, "n_partitions": int, "n_structures": int, "n_atoms": int}``
        once per featurization run (a new start with the same ``run`` resets its progress);
    ``{"kind": "partition", "run": str, "partition": int, "n_structures": int,
    "n_atoms": int, "seconds": float, "worker": str, "n_skipped": int}``
        once per finished partition (a repeat of the same partition replaces the earlier one);
        ``n_structures`` counts those featurized, ``n_skipped`` those skipped
        (``on_error="skip"``), both of the start's ``n_structures``;
    ``{"kind": "end", "run": str, "error": str | None}``
        once when the run ends: ``error`` is ``None`` when every partition is done, else
        what stopped it (partitions failed, interrupted).

``dparallel-train`` (:data:`TOPIC_TRAIN`)
    ``{"kind": "start", "run": str, "run_id": str}``
        once when a training run starts, before it reads its settings and data: the page
        shows this run from then on (no epochs yet), so one failing before its first
        epoch is shown failed;
    ``{"run": str, "epoch": int, "split": "train" | "validation", "loss": float,
    "energy_rmse": float | None, "force_rmse": float | None, "best_epoch": int}``
        once per epoch and split; RMSEs in eV/atom and eV/Å, ``None`` when not computed;
        ``best_epoch`` (the training loop's best so far) only when its row carried one;
    ``{"kind": "end", "run": str, "run_id": str, "error": str | None}``
        once when the training run ends (``error``: ``None``, or what stopped it).

The publish helpers find the target themselves: inside a Dask task the current worker,
otherwise the default client; with no cluster attached they do nothing and return ``False``.
Training does not know the dashboard: its callers pass :func:`epoch_publisher` among the
callbacks of :func:`dparallel.train.train`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import uuid
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

__all__ = [
    "TOPIC_PROGRESS",
    "TOPIC_TRAIN",
    "EpochPublisher",
    "end_event",
    "epoch_publisher",
    "progress_partition_event",
    "progress_start_event",
    "publish_progress",
    "publish_progress_end",
    "publish_progress_start",
    "publish_train_metrics",
    "train_event",
    "train_start_event",
    "worker_name",
]

logger = logging.getLogger(__name__)

TOPIC_PROGRESS = "dparallel-progress"
TOPIC_TRAIN = "dparallel-train"


class _EventTarget(Protocol):
    def log_event(self, topic: str, msg: Any) -> None: ...


def _nonneg_int(name: str, value: Any) -> int:
    out = int(value)
    if out < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return out


def _metric(value: float | None) -> float | None:
    if value is None:
        return None
    out = float(value)
    return None if math.isnan(out) else out


def progress_start_event(
    run: str, n_partitions: int, n_structures: int, n_atoms: int = 0, n_done_before: int = 0
) -> dict:
    """Payload announcing a featurization run of ``n_partitions`` partitions (one task
    each); ``n_done_before``: the store's partitions done by earlier runs, not counted."""
    return {
        "kind": "start",
        "run": str(run),
        "n_partitions": _nonneg_int("n_partitions", n_partitions),
        "n_structures": _nonneg_int("n_structures", n_structures),
        "n_atoms": _nonneg_int("n_atoms", n_atoms),
        "n_done_before": _nonneg_int("n_done_before", n_done_before),
    }


def progress_partition_event(
    run: str,
    partition: int,
    n_structures: int,
    n_atoms: int,
    seconds: float,
    worker: str,
    n_skipped: int = 0,
) -> dict:
    """Payload reporting one finished partition (``seconds`` = its task's wall time;
    ``n_skipped``: its structures skipped, not among ``n_structures``)."""
    return {
        "kind": "partition",
        "run": str(run),
        "partition": _nonneg_int("partition", partition),
        "n_structures": _nonneg_int("n_structures", n_structures),
        "n_atoms": _nonneg_int("n_atoms", n_atoms),
        "seconds": max(float(seconds), 0.0),
        "worker": str(worker),
        "n_skipped": _nonneg_int("n_skipped", n_skipped),
    }


#: The longest error text an end event carries (the page shows it; the log has the rest).
_MAX_ERROR = 300


def end_event(
    run: str, error: BaseException | str | None = None, run_id: str | None = None
) -> dict:
    """Payload closing a run: ``error`` ``None`` when it finished, else what stopped it
    (an exception is named by its type and message; ``KeyboardInterrupt``: interrupted).
    With ``run_id`` it closes a training run (topic ``dparallel-train``)."""
    if isinstance(error, KeyboardInterrupt):
        error = "interrupted"
    elif isinstance(error, BaseException):
        error = f"{type(error).__name__}: {error}".strip().removesuffix(":")
    out = {"kind": "end", "run": str(run), "error": None if error is None else error[:_MAX_ERROR]}
    if run_id is not None:
        out["run_id"] = str(run_id)
    return out


def train_start_event(run: str, run_id: str) -> dict:
    """Payload announcing the training run ``run_id`` named ``run`` (topic
    ``dparallel-train``)."""
    return {"kind": "start", "run": str(run), "run_id": str(run_id)}


def train_event(
    run: str,
    epoch: int,
    split: Literal["train", "validation"],
    loss: float,
    energy_rmse: float | None = None,
    force_rmse: float | None = None,
    data_wait_fraction: float | None = None,
    run_id: str | None = None,
) -> dict:
    """Payload with one epoch's metrics for one split (and, for training, its data wait);
    ``run_id``: the training run's own id (runs of one name are told apart by it)."""
    if split not in ("train", "validation"):
        raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
    out = {
        "run": str(run),
        "epoch": _nonneg_int("epoch", epoch),
        "split": split,
        "loss": _metric(loss),
        "energy_rmse": _metric(energy_rmse),
        "force_rmse": _metric(force_rmse),
    }
    if data_wait_fraction is not None:
        out["data_wait_fraction"] = _metric(data_wait_fraction)
    if run_id is not None:
        out["run_id"] = str(run_id)
    return out


def _resolve_target(target: _EventTarget | None) -> tuple[_EventTarget | None, str]:
    """The worker running this task, else the default client, else ``None``; plus a name."""
    if target is not None:
        return target, str(getattr(target, "address", "client"))
    if "distributed" not in sys.modules:  # no worker nor client here: spare its import (~1 s)
        return None, ""
    try:
        from distributed import get_worker

        worker = get_worker()
        return worker, str(worker.address)
    except (ImportError, ValueError):
        pass
    try:
        from distributed import default_client

        return default_client(), "client"
    except (ImportError, ValueError):
        return None, ""


def worker_name() -> str:
    """The address of the Dask worker running this task ('' outside one)."""
    target, name = _resolve_target(None)
    return name if target is not None and name != "client" else ""


def _connected(target: _EventTarget | None) -> _EventTarget | None:
    """``target``, unless it is a client that lost its scheduler (an end event sent then
    would wait for the reconnection to time out before the run's error is raised)."""
    return None if getattr(target, "status", "running") != "running" else target


def _publish(topic: str, msg: dict, target: _EventTarget | None) -> bool:
    if target is None:
        return False
    try:
        target.log_event(topic, msg)
    except Exception:
        logger.debug("could not publish %s event", topic, exc_info=True)
        return False
    return True


def publish_progress_start(*fields: Any, target: _EventTarget | None = None, **named: Any) -> bool:
    """Announce a featurization run (:func:`progress_start_event`'s arguments); returns
    whether an event was sent."""
    resolved, _ = _resolve_target(target)
    return _publish(TOPIC_PROGRESS, progress_start_event(*fields, **named), resolved)


def publish_progress(
    run: str,
    partition: int,
    n_structures: int,
    n_atoms: int,
    seconds: float,
    *,
    worker: str | None = None,
    target: _EventTarget | None = None,
    n_skipped: int = 0,
) -> bool:
    """Report one finished partition from its task (``worker``: by default the one running
    it) or the client; returns whether an event was sent (not without a cluster)."""
    resolved, name = _resolve_target(target)
    msg = progress_partition_event(
        run, partition, n_structures, n_atoms, seconds, worker if worker is not None else name,
        n_skipped,
    )  # fmt: skip
    return _publish(TOPIC_PROGRESS, msg, resolved)


def publish_progress_end(
    run: str, error: BaseException | str | None = None, *, target: _EventTarget | None = None
) -> bool:
    """Close a featurization run (:func:`end_event`); returns whether an event was sent."""
    resolved, _ = _resolve_target(target)
    return _publish(TOPIC_PROGRESS, end_event(run, error), _connected(resolved))


def publish_train_metrics(*fields: Any, target: _EventTarget | None = None, **named: Any) -> bool:
    """Publish one epoch's metrics (:func:`train_event`'s arguments); returns whether an
    event was sent."""
    resolved, _ = _resolve_target(target)
    return _publish(TOPIC_TRAIN, train_event(*fields, **named), resolved)


class EpochPublisher:
    """An epoch callback sending each metrics row under the name ``run``: one event per
    split with a finite loss (a no-op without a cluster). Each publisher is one training
    run with an id of its own, announced when the publisher is made (before the training
    reads its settings and data), so a later run of the same name replaces the page's curves
    from its start, and one failing before its first epoch is shown failed.
    ``history``: the rows of the epochs a resumed run trained before, sent at once under
    the same id, so its curves go on from them rather than start at the resumed epoch.
    :meth:`ending` wraps the training: the page then says whether it finished or failed."""

    def __init__(self, run: str, history: Iterable[Mapping[str, Any]] = ()) -> None:
        self.run = run
        self.run_id = uuid.uuid4().hex[:12]
        resolved, _ = _resolve_target(None)
        _publish(TOPIC_TRAIN, train_start_event(run, self.run_id), resolved)
        for row in history:
            self(row)

    def __call__(self, row: Mapping[str, Any]) -> None:
        resolved, _ = _resolve_target(None)
        for split in ("train", "validation"):
            loss = row.get(f"{split}_loss")
            if loss is None or not math.isfinite(loss):
                continue
            msg = train_event(
                self.run,
                int(row["epoch"]),
                split,
                float(loss),
                row.get(f"{split}_energy_rmse"),
                row.get(f"{split}_force_rmse"),
                data_wait_fraction=row.get("data_wait_fraction") if split == "train" else None,
                run_id=self.run_id,
            )
            if row.get("best_epoch") is not None:  # the loop's; metrics.csv rows have none
                msg["best_epoch"] = int(row["best_epoch"])
            _publish(TOPIC_TRAIN, msg, resolved)

    def finish(self, error: BaseException | str | None = None) -> bool:
        """Say the run ended (``error``: what stopped it); whether an event was sent."""
        resolved, _ = _resolve_target(None)
        return _publish(TOPIC_TRAIN, end_event(self.run, error, self.run_id), _connected(resolved))

    @contextlib.contextmanager
    def ending(self) -> Iterator[EpochPublisher]:
        """Run the training inside: its end is published, with the error that ended it."""
        try:
            yield self
        except BaseException as exc:
            self.finish(exc)
            raise
        self.finish()


def epoch_publisher(run: str, history: Iterable[Mapping[str, Any]] = ()) -> EpochPublisher:
    """:class:`EpochPublisher` for the training run named ``run``."""
    return EpochPublisher(run, history)
