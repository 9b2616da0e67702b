"""``dparallel train STORE -o MODEL_DIR``: train an HDNNP from a featurized store (or one of
structures only, with ``--descriptors FILE --descriptor-source computed``)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dparallel._files import full_disk_error
from dparallel.cli._options import (
    add_json_argument,
    add_scheduler_arguments,
    add_torch_threads_argument,
    device_option,
    local_argument,
)
from dparallel.cli._progress import EpochProgress, closing_lines, error_line
from dparallel.errors import DParallelError, RunInterruptedError, TrainingError

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> None:
    """Register the ``train`` sub-command."""
    p = subparsers.add_parser(
        "train",
        help="train a neural-network potential from a featurized store",
        description="Train a Behler-Parrinello HDNNP on energies and forces streamed from "
        "STORE. Writes checkpoints, metrics.csv/json, plots and model.pt into MODEL_DIR.",
    )
    p.add_argument(
        "store",
        help="featurized zarr store, or one made by dparallel ingest (with --descriptors): "
        "a directory or a URL (s3://…)",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=local_argument("the model directory"),
        help="model directory (local)",
    )
    p.add_argument(
        "--config",
        type=local_argument("a training config file"),
        help="YAML file with the training keys, a workflow file (its 'training:' section) "
        "or an n2p2 input.nn (the keys it implies; docs/n2p2.md)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one training key (repeatable; YAML values), e.g. --set epochs=50 "
        "or --set training.epochs=50",
    )
    p.add_argument(
        "--descriptors",
        metavar="FILE",
        type=local_argument("a descriptors file"),
        help="descriptors YAML (as featurize takes; or a workflow file: its descriptors) for "
        "a store without features (dparallel ingest): computed during training, with "
        "--descriptor-source computed",
    )
    p.add_argument(
        "--descriptor-source",
        choices=("stored", "computed"),
        help="stored: the store's descriptors; computed: from the structures, per "
        "mini-batch; same as --set descriptor_source=...",
    )
    p.add_argument("--resume", action="store_true", help="continue from MODEL_DIR/checkpoint.pt")
    p.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="train on the done partitions of an incomplete store (says how many it uses); "
        "same as --set allow_incomplete=true",
    )
    _add_where_arguments(p)
    p.set_defaults(func=run)


def _add_where_arguments(p: argparse.ArgumentParser) -> None:
    """Where ``train`` runs and reports: its dashboard's scheduler, device, threads, output."""
    add_scheduler_arguments(
        p, ": publish per-epoch metrics to its dashboard (training itself runs in this process)"
    )
    p.add_argument(
        "--device",
        type=device_option,
        help="where to train: auto (CUDA when present), cpu, cuda or cuda:N; "
        "same as --set device=...",
    )
    add_torch_threads_argument(
        p, 0, "torch threads of the training (default: the config's threads, else 1; 0: "
        "torch's own); same as --set threads=N",
    )  # fmt: skip
    add_json_argument(p, "the outcome (the final errors in meV, as in metrics.json)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Train (a progress bar on a terminal); print the final errors and what to run next."""
    from dparallel.dashboard import epoch_publisher
    from dparallel.train import parse_training_spec, train  # torch: only when training
    from dparallel.train.reporting import read_history

    overrides = _option_overrides(args)
    bar: EpochProgress | None = None
    try:
        if args.scheduler or args.scheduler_file:
            from dparallel.cluster import connect
            from dparallel.cluster.logs import scheduler_loss_said

            # the scheduler receives the metric events
            cluster: Any = connect(scheduler=args.scheduler, scheduler_file=args.scheduler_file)
            lost = scheduler_loss_said(
                f"lost the Dask scheduler {cluster.client.scheduler.address}: its dashboard "
                f"shows no more epochs; training goes on here ({args.output}/metrics.csv)"
            )
        else:
            cluster = lost = contextlib.nullcontext()  # type: ignore[assignment]
        with cluster, lost:
            earlier = read_history(args.output) if args.resume else []  # curves go on
            # the run is on the page from here: a bad setting or store is shown failed too
            publisher = epoch_publisher(Path(args.output).resolve().name, earlier)
            with publisher.ending():  # the page says whether it finished or failed
                spec = parse_training_spec(args.config, overrides)
                store, descriptors = _store_and_descriptors(args.store, args.descriptors)
                bar = EpochProgress(spec.epochs, quiet=args.quiet)
                result = train(
                    store,
                    args.output,
                    spec,
                    resume=args.resume,
                    callback=[publisher, bar.update],
                    descriptors=descriptors,
                )
    except KeyboardInterrupt:
        from dparallel.train.model_dir import kept_checkpoint

        checkpoint = kept_checkpoint(args.output)
        kept = (
            f"{checkpoint} (the last finished epoch) is kept: rerun with --resume to continue"
            if checkpoint is not None
            else "no epoch had finished"
        )
        raise RunInterruptedError(f"interrupted; {kept}") from None
    except OSError as exc:  # a rerun without --resume trains anew: say what is kept
        full = full_disk_error(exc, _rerun_advice(Path(args.output), "free some space"))
        if full is not None:
            raise full from None
        if isinstance(exc, DParallelError):
            raise
        where = f": {exc.filename}" if exc.filename else ""
        advice = _rerun_advice(Path(args.output), "fix that")
        raise TrainingError(f"{exc.strerror or exc}{where}; {advice}") from None
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        print(_json_report(result))
        return 0
    for split, m in (("validation", result.validation), ("test", result.test)):
        if m:
            print(error_line(split, m))
    print(
        f"model: {result.model_dir / 'model.pt'} (best epoch {result.best_epoch}, "
        f"{len(result.history)} epochs run)"
    )
    source = _source_file(args.store)
    print("\n".join(closing_lines(result.seconds, model=result.model_dir, data=source)))
    return 0


def _option_overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` items, then those of the options that are short for one."""
    named = {"device": args.device, "descriptor_source": args.descriptor_source,
             "threads": args.torch_threads}  # fmt: skip
    return [
        *args.overrides,
        *(["allow_incomplete=true"] if args.allow_incomplete else []),
        *(f"{key}={value}" for key, value in named.items() if value is not None),
    ]


def _json_report(result: Any) -> str:
    """``train --json``: the model file, its epochs and the final errors of each split
    (meV, the unit in each name, as ``metrics.json``'s ``final``)."""
    from dparallel._files import strict_json
    from dparallel.train.metric_units import with_units

    final = {s: with_units(m) for s, m in (("validation", result.validation),
                                           ("test", result.test)) if m}  # fmt: skip
    report = {
        "model": str(result.model_dir / "model.pt"),
        "best_epoch": result.best_epoch,
        "epochs_run": len(result.history),
        "seconds": result.seconds,
        "final": final,
    }
    return strict_json(report, indent=1, what="train --json", missing=True)


def _store_and_descriptors(store: str, path: str | None) -> tuple[Any, Any]:
    """The store given and the descriptors of ``--descriptors`` (a descriptors file or a
    workflow's section; an n2p2 input.nn's lengths in the units of the store's data), or
    ``None``."""
    from dparallel.store import open_store

    opened = open_store(store)
    if path is None:
        return opened, None
    from dparallel.train.data_units import store_data_units
    from dparallel.workflow.descriptors_spec import load_descriptors

    units = store_data_units(opened) or "ase"
    return opened, load_descriptors(path, data_units=units, workflows=True)


def _rerun_advice(model_dir: Path, fix: str) -> str:
    """What to do after ``fix`` (a full disk, a read-only model directory): ``--resume``
    keeps the finished epochs, a plain rerun would start anew (and remove them)."""
    from dparallel.train.model_dir import kept_checkpoint

    checkpoint = kept_checkpoint(model_dir)
    if checkpoint is not None:
        return (
            f"{fix} and rerun with --resume to continue from {checkpoint} (the last "
            "finished epoch; without --resume training starts anew)"
        )
    return f"{fix} and rerun the same command (no epoch had finished)"


def _source_file(store: str) -> str | None:
    """The structure file the store was made from, if it is still there (for ``evaluate``)."""
    from dparallel.io.location import as_location
    from dparallel.store import open_store

    try:
        path = open_store(store).attrs.get("source", {}).get("path")
        return str(path) if path and as_location(path).is_file() else None  # a URL too
    except Exception:  # noqa: BLE001 - only a suggestion
        return None
