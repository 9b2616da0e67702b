"""``dparallel run WORKFLOW``: dataset → featurize → train → export, skipping finished stages."""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

from dparallel.cli._options import (
    add_cluster_arguments,
    cluster_kwargs,
    on_connect,
    partition_progress,
    route_cluster_logs,
)

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``run`` sub-command."""
    p = subparsers.add_parser(
        "run",
        help="run a workflow end to end (resumable)",
        description="Validate WORKFLOW, then generate/read the dataset, featurize it on a Dask "
        "cluster, train and export a potential. Stages already complete are skipped.",
    )
    p.add_argument("workflow", help="workflow YAML (see workflows/quickstart.yaml)")
    add_run_arguments(p)
    return p


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by ``run`` and ``demo``."""
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a workflow key (repeatable), e.g. --set training.epochs=20",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress or epoch lines")
    add_cluster_arguments(p)


def _milli(x: float | None) -> str:
    return "nan" if x is None or not math.isfinite(x) else f"{1e3 * x:.2f}"


def execute(spec: Any, args: argparse.Namespace, protect: tuple[str, ...] = ()) -> int:
    """Run a validated workflow with the CLI's progress output; print a summary.

    ``protect``: the workflow file (never replaced by ``store.overwrite``).
    """
    from dparallel.workflow.run import run_workflow

    def say(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    def on_epoch(row: dict[str, Any]) -> None:
        if not args.quiet and (row["epoch"] % 10 == 0 or row["epoch"] == 1):
            say(
                f"epoch {row['epoch']:4d}  val energy RMSE "
                f"{_milli(row.get('validation_energy_rmse'))} meV/atom, force RMSE "
                f"{_milli(row.get('validation_force_rmse'))} meV/Å"
            )

    kwargs = cluster_kwargs(args, spec.cluster)
    if kwargs["cluster"] is not spec.cluster:
        spec = spec.model_copy(update={"cluster": kwargs["cluster"]})
    if args.torch_threads is not None:
        spec = spec.model_copy(
            update={
                "cluster": spec.cluster.model_copy(update={"torch_threads": args.torch_threads})
            }
        )
    route_cluster_logs(args, spec.store.path)
    result = run_workflow(
        spec,
        scheduler=kwargs["scheduler"],
        scheduler_file=kwargs["scheduler_file"],
        say=say,
        progress=partition_progress(args.quiet, "featurize"),
        on_epoch=on_epoch,
        on_connect=on_connect(args),
        protect=protect,
    )
    print("stages: " + ", ".join(f"{k} {v}" for k, v in result.stages.items()))
    for split in ("validation", "test"):
        m = result.metrics.get(split)
        if m:
            print(
                f"{split}: energy RMSE {_milli(m.get('energy_rmse'))} meV/atom "
                f"(MAE {_milli(m.get('energy_mae'))}), force RMSE {_milli(m.get('force_rmse'))} "
                f"meV/Å (MAE {_milli(m.get('force_mae'))})"
            )
    for what, path in result.files.items():
        print(f"{what}: {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Load the workflow and run it."""
    from dparallel.workflow.spec import load_workflow

    return execute(load_workflow(args.workflow, args.overrides), args, protect=(args.workflow,))
