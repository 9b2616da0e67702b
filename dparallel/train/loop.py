"""The training loop: prepare, run the epochs, keep the best model, report.

``train(store, model_dir, spec)`` is the library entry point behind ``dparallel train``.
Its jobs live beside it: :mod:`~dparallel.train.preparation` (data, model, optimizer),
:mod:`~dparallel.train.device` (dtype and device), :mod:`~dparallel.train.feed` (how
batches reach it), :mod:`~dparallel.train.optimizers` (one update per batch, chosen once),
:mod:`~dparallel.train.checkpoints` and :mod:`~dparallel.train.reporting`.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from dparallel._files import write_file
from dparallel.config import resolve_path
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.errors import ArgumentTypeError, TrainingError
from dparallel.nn import HDNNP, MODEL, load_model
from dparallel.store import Store, open_store
from dparallel.train.checkpoints import (
    BEST,
    CHECKPOINT,
    SPEC_JSON,
    Progress,
    resume_from,
    save_checkpoint,
    save_model,
    split_digest,
)
from dparallel.train.data import PartitionReader, train_cache_bytes
from dparallel.train.data_units import record_data_units
from dparallel.train.device import Target, out_of_memory
from dparallel.train.feed import BatchFeed
from dparallel.train.host_memory import check_host_memory
from dparallel.train.init_from import spec_source
from dparallel.train.model_dir import check_store_unchanged, claim_model_dir
from dparallel.train.optimizers import Optimizer, make_optimizer
from dparallel.train.preparation import Prepared, build_model, check_complete, prepare
from dparallel.train.reporting import (
    EpochCallback,
    Metrics,
    epoch_row,
    evaluate_split,
    notify,
    write_metrics,
    write_plots,
)
from dparallel.train.spec import TrainingSpec
from dparallel.train.structure_data import StructureReader, choose_engine

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable
    from pathlib import Path

    import numpy as np

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """Outcome of :func:`train`: final model, per-epoch history and final test metrics."""

    model: HDNNP
    model_dir: Path
    history: list[dict[str, Any]]
    test: dict[str, float]
    validation: dict[str, float]
    best_epoch: int
    seconds: float


@dataclass
class _Run:
    """One call's working set: the prepared data, the feed, model and optimizer."""

    spec: TrainingSpec
    prep: Prepared
    feed: BatchFeed
    model: HDNNP
    optimizer: Optimizer
    reader: PartitionReader
    model_dir: Path


def train(
    store: Store | str | os.PathLike[str],
    model_dir: str | os.PathLike[str],
    spec: TrainingSpec | None = None,
    *,
    resume: bool = False,
    callback: EpochCallback | Iterable[EpochCallback] | None = None,
    descriptors: DescriptorSet | None = None,
) -> TrainResult:
    """Train an HDNNP on a featurized store; writes checkpoints, metrics and plots.

    Parameters
    ----------
    store
        Featurized store (or its path) with ``features/<spec.descriptor>``, or a store of
        structures only (``dparallel ingest``) with ``descriptors``.
    model_dir
        Output directory: ``checkpoint.pt`` (every epoch), ``best.pt``, ``model.pt``
        (best model), ``metrics.csv``/``metrics.json``, ``spec.json``, PNG plots.
    spec
        Training configuration (defaults: :class:`TrainingSpec`).
    resume
        Continue from ``model_dir/checkpoint.pt`` (same spec except ``epochs``).
    callback
        Called, in order, with each epoch's metrics row (the CLI prints it; the caller
        passes one that publishes to the dashboard). One returning ``True`` stops the run
        after that epoch: the checkpoint is the result, ``--resume`` continues it.
    descriptors
        The descriptors to compute during training (``spec.descriptor_source:
        computed``) from a store without ``features/<spec.descriptor>``; their scaling
        statistics are computed over the store's structures as featurize records them.
        Given with a featurized store, they must be the store's.

    Returns
    -------
    TrainResult

    Raises
    ------
    TrainingError
        The store is incomplete and ``spec.allow_incomplete`` is off; a checkpoint or
        model file is unreadable, corrupt or holds more than tensors and plain data;
        the store lacks the features or derivatives the spec needs; the loss of an epoch
        is not finite (diverged); the store changed under the run.
    """
    if spec is not None and not isinstance(spec, TrainingSpec):
        raise ArgumentTypeError(
            f"train: spec is a {type(spec).__name__}, not a TrainingSpec (a mapping or a file "
            "of training keys: dparallel.train.parse_training_spec(...))"
        )
    if descriptors is not None and not isinstance(descriptors, DescriptorSet):
        raise ArgumentTypeError(
            f"train: descriptors is a {type(descriptors).__name__}, not a DescriptorSet (a "
            "descriptors file: dparallel.workflow.descriptors_spec.load_descriptors(path))"
        )
    store = store if isinstance(store, Store) else open_store(store)
    previous = torch.get_num_threads()  # spec.threads is this call's, not the process's
    try:
        # the run seeds and draws torch's CPU generator; the caller's state is restored;
        # gradients on also in a caller's torch.no_grad() or inference_mode() block
        with (
            torch.inference_mode(False),
            torch.enable_grad(),
            torch.random.fork_rng(devices=[]),
            claim_model_dir(model_dir, store, resume=resume, init_from=_init_from(spec)) as path,
        ):  # ours, leased, one store
            return _train(store, path, spec, resume, callback, descriptors)
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


def _init_from(spec: TrainingSpec | None) -> Path | None:
    """The model the run starts from (``init_from``): training into its folder, which a new
    run empties, is refused before anything is removed; its fingerprint is recorded."""
    return None if spec is None or spec.init_from is None else resolve_path(spec.init_from)


def _train(
    store: Store,
    model_dir: Path,
    spec: TrainingSpec | None,
    resume: bool,
    callback: EpochCallback | Iterable[EpochCallback] | None,
    descriptors: DescriptorSet | None,
) -> TrainResult:
    """:func:`train` in the model directory it holds."""
    t_start = time.perf_counter()
    spec = spec or TrainingSpec()
    callbacks = [] if callback is None else [callback] if callable(callback) else list(callback)
    coverage = check_complete(store, spec)
    run, progress = _set_up(store, model_dir, spec, resume, descriptors)
    # a checkpoint of the epoch that stopped early (killed while finishing): finish it
    stopped_early = _stops_early(spec, progress)
    if stopped_early:
        log.info("the checkpoint stopped early (best %d): finishing it", progress.best_epoch)
    for epoch in range(spec.epochs if stopped_early else progress.start_epoch, spec.epochs):
        row = _epoch(run, epoch, progress)
        stop = notify(callbacks, {**row, "best_epoch": progress.best_epoch})  # the best so far
        if row.get("diverged"):
            log.warning(
                "epoch %d: the loss is not finite (the model diverged); stopping with the "
                "best epoch, %d (a smaller learning rate, lr, may train further)",
                epoch,
                progress.best_epoch,
            )
            stopped_early = True
            break
        if _stops_early(spec, progress):
            log.info("early stopping at epoch %d (best %d)", epoch, progress.best_epoch)
            stopped_early = True
            break
        if stop:
            break
    last = progress.history[-1]["epoch"] if progress.history else -1
    final: dict[str, dict[str, float]] = {}
    best = run.model  # stopped by a callback: the checkpoint is the result
    if stopped_early or last >= spec.epochs - 1:  # a checkpoint past ``epochs``: finished
        if progress.best_epoch < 0:  # resumed with no epochs left and its best dropped
            raise TrainingError(
                f"{model_dir}: no epoch is the best on this data (best.pt is missing, or "
                "not finite on the structures done since) and no epochs are left: resume "
                f"with more epochs than {spec.epochs}"
            )
        best, final = _finish(run, progress, coverage)
    seconds = time.perf_counter() - t_start
    test, validation = final.get("test", {}), final.get("validation", {})
    return TrainResult(
        best, run.model_dir, progress.history, test, validation, progress.best_epoch, seconds
    )


def _stops_early(spec: TrainingSpec, progress: Progress) -> bool:
    """Early stopping is on and its count of epochs without improvement is reached."""
    return bool(spec.early_stopping) and progress.bad_epochs >= spec.early_stopping


def _set_up(
    store: Store,
    model_dir: Path,
    spec: TrainingSpec,
    resume: bool,
    descriptors: DescriptorSet | None = None,
) -> tuple[_Run, Progress]:
    """Prepare the data, place and build model and optimizer, resume; write spec.json."""
    model_dir.mkdir(parents=True, exist_ok=True)
    if spec.threads:
        torch.set_num_threads(spec.threads)
    source = None if spec.init_from is None else spec_source(spec, store)  # before the pass
    prep = prepare(store, spec, descriptors)
    counts = [prep.index.count(split) for split in ("train", "validation", "test")]
    log.info("splits: %d train, %d validation, %d test structures", *counts)
    target = Target.of(spec)
    model = build_model(prep, spec, target, source)
    optimizer = make_optimizer(model, spec, counts[0])
    progress = Progress()
    if resume:
        progress = resume_from(model_dir / CHECKPOINT, spec, model, optimizer, prep.descriptor_spec)
    write_file(model_dir / SPEC_JSON, json.dumps(spec.to_dict(), indent=1))
    cache = train_cache_bytes()
    reader = PartitionReader(store, spec.descriptor, prep.elements, prep.index, prep.forces, cache)
    if spec.descriptor_source == "computed":  # structures only; descriptors computed per batch
        reader = StructureReader(
            store, spec.descriptor, prep.descriptor_spec or {}, prep.elements, prep.index,
            prep.forces, cache,
            choose_engine(
                spec.descriptor, spec.compute_with, optimizer.needs_derivatives,
                target.device.type,
            ),
        )  # fmt: skip
    feed = BatchFeed(target, spec.data_on_device, spec.batch_prefetch)
    feed.hold(reader)
    if feed.held is None and reader.holdable:  # streamed from the store
        check_host_memory(reader, spec, cache)
    run = _Run(spec, prep, feed, model, optimizer, reader, model_dir)
    digest = split_digest(prep.index.ids_of(_monitored_split(run)))
    if resume and progress.best_epoch >= 0 and not (model_dir / BEST).is_file():
        log.warning(
            "%s is missing: the checkpoint's best (epoch %d) is no best any more, the next "
            "epoch replaces it", model_dir / BEST, progress.best_epoch,
        )  # fmt: skip
        progress.best_val, progress.best_epoch, progress.bad_epochs = math.inf, -1, 0
        run.optimizer.monitor_rebased(math.inf)
    elif resume and progress.validation_digest != digest:
        if _monitored_split(run) == "validation":
            _measure_best_again(run, progress)
        else:
            _compare_afresh(run, progress)
    progress.validation_digest = digest
    return run, progress


def _monitored_split(run: _Run) -> str:
    """The split whose loss picks the best epoch: validation, or training without one."""
    return "validation" if run.prep.index.count("validation") > 0 else "train"


def _measure_best_again(run: _Run, progress: Progress) -> None:
    """Resumed on another validation set (partitions done since the checkpoint, or a
    checkpoint that does not say): ``best.pt``'s loss on this one becomes the best so far,
    so the epochs to come, early stopping and a plateau schedule compare losses over the
    same structures.

    A loss that is not finite there (best.pt diverges on a new structure) is no best: as
    an epoch of such a loss is never one, none is kept (the next finite epoch replaces
    best.pt, and a run with none fails as a fresh one does).
    """
    if progress.best_epoch < 0:
        return
    best = run.feed.target.model(load_model(run.model_dir / BEST)[0])
    loss = evaluate_split(best, run.reader, "validation", run.spec, feed=run.feed).summary()["loss"]
    log.info(
        "the validation set is not the one of the checkpoint's best loss (%.6g): best.pt "
        "(epoch %d) measured on it again: %.6g",
        progress.best_val, progress.best_epoch, loss,
    )  # fmt: skip
    if not math.isfinite(loss):
        log.warning(
            "best.pt (epoch %d) has a loss that is not finite on the new validation set: it "
            "is no best there, the next epoch with a finite loss replaces it",
            progress.best_epoch,
        )
        loss, progress.best_epoch, progress.bad_epochs = math.inf, -1, 0
    progress.best_val = loss
    run.optimizer.monitor_rebased(loss)


def _compare_afresh(run: _Run, progress: Progress) -> None:
    """Resumed on another training set without a validation set: the monitored loss is an
    epoch's running training loss, which no measurement of ``best.pt`` matches (measured at
    fixed weights it is lower), so the best loss is forgotten: best.pt stays until the next
    epoch replaces it, and early stopping and a plateau schedule count from there."""
    log.info(
        "the training set is not the one of the checkpoint's best loss (%.6g, epoch %d): "
        "the next epoch's loss replaces it",
        progress.best_val, progress.best_epoch,
    )  # fmt: skip
    progress.best_val, progress.bad_epochs = math.inf, 0
    run.optimizer.monitor_rebased(math.inf)


def _train_epoch(run: _Run, epoch: int) -> tuple[dict[str, float], float]:
    """One pass over the training split, an update per mini-batch; errors, data-wait share.

    The share is the time the loop waited for the next batch over the pass's wall time.
    """
    model, optimizer, feed, forces = run.model, run.optimizer, run.feed, run.prep.forces
    optimizer.begin_epoch()
    model.train()
    m = Metrics(run.spec.force_weight)  # the configured weight: epochs compare
    feed.wait.seconds = 0.0
    t0 = time.perf_counter()
    batches = feed.batches(run.reader, "train", run.spec, epoch=epoch)
    batch = None
    try:
        for batch in batches:
            energy, predicted, _ = optimizer.step(model, batch, forces)
            m.add(energy, predicted, batch)
            batch = None  # not held while the next one is read
        summary = m.summary()  # waits for the device's queued work
    except torch.OutOfMemoryError as exc:
        where = f"a training step of epoch {epoch}"
        raise out_of_memory(exc, feed.device, batch, where) from None
    finally:
        batches.close()  # stops the prefetch threads, also on an error
    model.eval()
    seconds = time.perf_counter() - t0
    return summary, feed.wait.seconds / seconds if seconds > 0 else 0.0


def _epoch(run: _Run, epoch: int, progress: Progress) -> dict[str, Any]:
    """Train one epoch, validate, step the schedule, save best/checkpoint/metrics; its row."""
    t0 = time.perf_counter()
    spec, prep = run.spec, run.prep
    has_val = prep.index.count("validation") > 0
    try:
        train_sum, wait = _train_epoch(run, epoch)
        if has_val:
            try:
                val_sum = evaluate_split(
                    run.model, run.reader, "validation", spec, feed=run.feed
                ).summary()
            except torch.OutOfMemoryError as exc:
                where = f"validation after epoch {epoch}"
                raise out_of_memory(exc, run.feed.device, None, where) from None
        else:
            val_sum = dict.fromkeys(train_sum, float("nan"))
    except Exception:
        # a store replaced mid-epoch (--overwrite) fails the reads in many ways: say so
        check_store_unchanged(prep.store, run.model_dir)
        raise
    monitor = val_sum["loss"] if has_val else train_sum["loss"]
    finite = math.isfinite(train_sum["loss"]) and math.isfinite(monitor)
    if not finite and progress.best_epoch < 0:
        raise TrainingError(
            f"epoch {epoch}: the loss is not finite (training {train_sum['loss']}, monitored "
            f"{monitor}) and no epoch before it was: the model diverged; train anew with a "
            "smaller learning rate (lr), or check the data for values out of range"
        )
    lr = run.optimizer.lr
    columns = run.optimizer.columns()  # of the epoch just trained
    run.optimizer.end_epoch(monitor)
    check_store_unchanged(prep.store, run.model_dir)  # never save an epoch of mixed data
    if monitor < progress.best_val:
        progress.best_val, progress.best_epoch, progress.bad_epochs = monitor, epoch, 0
        save_model(run.model, spec, prep.descriptor_spec, run.model_dir / BEST)
    else:
        progress.bad_epochs += 1
    row = epoch_row(epoch, lr, train_sum, val_sum, time.perf_counter() - t0)
    row["train_structures"] = prep.index.count("train")  # per epoch, for the rate shown
    row["data_wait_fraction"] = wait
    row.update(columns)
    if not finite:  # diverged: its weights are not finite, nothing of it is kept
        return {**row, "diverged": True}
    progress.history.append(row)
    save_checkpoint(
        run.model_dir / CHECKPOINT, epoch, run.model, run.optimizer, progress, spec,
        prep.descriptor_spec,
    )  # fmt: skip
    write_metrics(run.model_dir, progress.history)
    return row


def _finish(
    run: _Run, progress: Progress, coverage: dict[str, Any]
) -> tuple[HDNNP, dict[str, dict[str, float]]]:
    """The best model as ``model.pt``, its final errors, metrics files and plots."""
    spec, prep, model_dir = run.spec, run.prep, run.model_dir
    best, _ = load_model(model_dir / BEST)
    best = run.feed.target.model(best)
    save_model(best, spec, prep.descriptor_spec, model_dir / MODEL)
    record_data_units(model_dir, prep.store)  # evaluate reads new data in these units
    final: dict[str, dict[str, float]] = {}
    parity: dict[str, dict[str, np.ndarray]] = {}
    for split in ("validation", "test"):
        if prep.index.count(split):
            mm = evaluate_split(best, run.reader, split, spec, keep=True, feed=run.feed)
            final[split] = mm.summary()
            parity[split] = mm.parity_arrays()
    extra = {
        "best_epoch": progress.best_epoch,
        "final": final,
        "splits": {s: prep.index.count(s) for s in ("train", "validation", "test")},
        "test_ids": prep.index.ids_of("test").tolist(),
        "validation_ids": prep.index.ids_of("validation").tolist(),
        "reference_energies": dict(zip(best.elements, best.ref_energy.tolist(), strict=True)),
        "data": coverage,
        "device": run.feed.describe(),
    }
    write_metrics(model_dir, progress.history, extra)
    write_plots(model_dir, progress.history, parity)
    return best, final
