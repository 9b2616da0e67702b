"""``dparallel train STORE -o MODEL_DIR``: train an HDNNP from a featurized store."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dparallel.errors import RunInterruptedError
from dparallel.train import parse_training_spec, train

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``train`` sub-command."""
    p = subparsers.add_parser(
        "train",
        help="train a neural-network potential from a featurized store",
        description="Train a Behler-Parrinello HDNNP on energies and forces streamed from "
        "STORE. Writes checkpoints, metrics.csv/json, plots and model.pt into MODEL_DIR.",
    )
    p.add_argument("store", help="featurized zarr store")
    p.add_argument("-o", "--output", required=True, help="model directory")
    p.add_argument(
        "--config",
        default=None,
        help="YAML file with the training keys, or a workflow file (its 'training:' section)",
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
    p.add_argument("--resume", action="store_true", help="continue from MODEL_DIR/checkpoint.pt")
    p.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="train on the done partitions of an incomplete store (says how many it uses); "
        "same as --set allow_incomplete=true",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        help="Dask scheduler address: publish per-epoch metrics to its dashboard "
        "(training itself runs in this process)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no per-epoch lines")
    return p


def _m(x: float | None) -> str:
    return "   nan" if x is None or not math.isfinite(x) else f"{1e3 * x:6.2f}"


def run(args: argparse.Namespace) -> int:
    """Train; prints one line per epoch and the final validation/test errors."""
    overrides = [*args.overrides, *(["allow_incomplete=true"] if args.allow_incomplete else [])]
    spec = parse_training_spec(args.config, overrides)

    def show(row: dict[str, Any]) -> None:
        if args.quiet:
            return
        print(
            f"epoch {row['epoch']:4d}  lr {row['lr']:.2e}  "
            f"train E {_m(row['train_energy_rmse'])} meV/atom F {_m(row['train_force_rmse'])} "
            f"meV/Å | val E {_m(row['validation_energy_rmse'])} F "
            f"{_m(row['validation_force_rmse'])}  ({row['seconds']:.1f} s)",
            flush=True,
        )

    try:
        if args.scheduler:
            from dparallel.cluster import connect

            with connect(scheduler=args.scheduler):  # its client receives the metric events
                result = train(args.store, args.output, spec, resume=args.resume, callback=show)
        else:
            result = train(args.store, args.output, spec, resume=args.resume, callback=show)
    except KeyboardInterrupt:
        checkpoint = Path(args.output) / "checkpoint.pt"
        kept = (
            f"{checkpoint} (the last finished epoch) is kept: rerun with --resume to continue"
            if checkpoint.exists()
            else "no epoch had finished"
        )
        raise RunInterruptedError(f"interrupted; {kept}") from None
    for split, m in (("validation", result.validation), ("test", result.test)):
        if m:
            print(
                f"{split}: energy RMSE {_m(m['energy_rmse'])} MAE {_m(m['energy_mae'])} "
                f"meV/atom, force RMSE {_m(m['force_rmse'])} MAE {_m(m['force_mae'])} meV/Å"
            )
    print(f"model: {result.model_dir / 'model.pt'} (best epoch {result.best_epoch})")
    return 0
