"""The workflow commands: ``dparallel run WORKFLOW`` (dataset → featurize → train → export,
skipping finished stages), ``demo`` (the embedded quickstart workflow), ``validate`` and
``schema``."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from dparallel.cli import _options as cluster_cli
from dparallel.cli._progress import (
    EpochProgress,
    FeaturizeProgress,
    closing_lines,
    error_line,
    train_options,
)

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from dparallel.workflow.spec import WorkflowSpec


def add_parser(subparsers: Any) -> None:
    """Register the ``run``, ``demo``, ``validate`` and ``schema`` sub-commands."""
    p = subparsers.add_parser(
        "run",
        help="run a workflow end to end (resumable)",
        description="Validate WORKFLOW, then generate/read the dataset, featurize it on a Dask "
        "cluster, train and export a potential. Stages already complete are skipped.",
    )
    p.add_argument(
        "workflow",
        type=cluster_cli.local_argument("a workflow file"),
        help="workflow YAML (see workflows/quickstart.yaml)",
    )
    add_run_arguments(p)
    p.add_argument(
        "--device",
        type=cluster_cli.device_option,
        help="where the training stage trains: auto, cpu, cuda or cuda:N "
        "(same as --set training.device=...)",
    )
    p.set_defaults(func=run)
    p = subparsers.add_parser(
        "demo",
        help="run the embedded quickstart workflow (generates its EMT Cu dataset)",
        description="Same as `dparallel run workflows/quickstart.yaml` with the copy shipped "
        "inside the package: generates EMT Cu data, featurizes on a local cluster, trains, "
        "exports and prints where everything is.",
    )
    add_run_arguments(p)
    p.set_defaults(func=demo)
    p = subparsers.add_parser("validate", help="validate a workflow file (exit 2 if invalid)")
    p.add_argument(
        "workflow", type=cluster_cli.local_argument("a workflow file"), help="workflow YAML"
    )
    add_set_argument(p)
    cluster_cli.add_json_argument(p, "the validated workflow")
    p.set_defaults(func=validate)
    p = subparsers.add_parser("schema", help="print the workflow JSON schema")
    p.set_defaults(func=schema)


def add_set_argument(p: argparse.ArgumentParser) -> None:
    """``--set KEY.PATH=VALUE``, as ``run``, ``demo`` and ``validate`` take it."""
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a workflow key (repeatable), e.g. --set training.epochs=20",
    )


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by ``run`` and ``demo``."""
    add_set_argument(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress or epoch lines")
    cluster_cli.add_json_argument(p)
    cluster_cli.add_cluster_arguments(p, workflow=True)


def execute(spec: Any, args: argparse.Namespace, protect: tuple[str, ...] = ()) -> int:
    """Run a validated workflow with the CLI's progress output; print a summary.

    ``protect``: the workflow file (never replaced by ``store.overwrite``).
    """
    from dparallel.workflow.run import run_workflow

    t0 = time.perf_counter()

    bars: list[EpochProgress] = []

    def say(text: str) -> None:
        for bar in bars:  # a stage after training (export): the train bar's clock stops
            bar.close()
        if not args.quiet:  # above any bar on the terminal, never through it
            tqdm.write(text, file=sys.stderr)

    def on_epoch(row: dict[str, Any]) -> None:
        if not bars:  # made at the first epoch, below the featurize bar
            bars.append(EpochProgress(spec.training.epochs, quiet=args.quiet))
        bars[0].update(row)

    kwargs = cluster_cli.cluster_kwargs(args, spec.cluster)
    cluster = kwargs["cluster"]
    if args.torch_threads is not None:
        cluster = cluster.model_copy(update={"torch_threads": args.torch_threads})
    spec = spec.model_copy(update={"cluster": cluster})
    store_protect = (*protect, spec.dataset.path)
    # a local cluster's forkserver warms up while the dataset stage and the driver start
    with cluster_cli.local_forkserver(args, spec.cluster):
        cluster_cli.refuse_unwritable_target(  # a URL with its storage_options
            spec.store_location(), overwrite=spec.store.overwrite, protect=store_protect
        )
        cluster_cli.route_cluster_logs(args, spec.store.path)
    result = run_workflow(
        spec,
        connect_to={"scheduler": kwargs["scheduler"], "scheduler_file": kwargs["scheduler_file"]},
        say=say,
        progress=FeaturizeProgress(quiet=args.quiet),
        on_epoch=on_epoch,
        on_connect=cluster_cli.on_connect(args),
        protect=protect,
    )
    for bar in bars:
        bar.close()
    if args.json:
        print(_json_report(result, time.perf_counter() - t0))
        return 0
    print("stages: " + ", ".join(f"{k} {v}" for k, v in result.stages.items()))
    for note in result.notes:
        print(f"note: {note}")
    for split in ("validation", "test"):
        if result.metrics.get(split):
            print(error_line(split, result.metrics[split]))
    for what, path in result.files.items():
        print(f"{what}: {path}")
    trained = result.model_dir is not None and result.stages.get("train") != "off"
    # without a model, what training the store needs (a workflow without a training section)
    to_train = [] if trained else train_options(spec.descriptor_set())
    print(
        "\n".join(
            closing_lines(
                time.perf_counter() - t0,
                store=str(result.store),
                model=result.model_dir if trained else None,
                data=str(result.dataset),
                exported=result.stages.get("export") in ("ran", "skipped"),
                train_options=to_train,
            )
        )
    )
    return 0


def _json_report(result: Any, seconds: float) -> str:
    """``run --json``: the stages, notes, final errors (meV, the unit in each name, as
    ``train --json``), files and locations of a workflow's run."""
    from dparallel._files import strict_json
    from dparallel.train.metric_units import with_units

    report = {
        "stages": result.stages,
        "notes": result.notes,
        "final": {split: with_units(m) for split, m in result.metrics.items() if m},
        "files": result.files,
        "dataset": str(result.dataset),
        "store": str(result.store),
        "model_dir": None if result.model_dir is None else str(result.model_dir),
        "seconds": seconds,
    }
    return strict_json(report, indent=1, what="run --json", missing=True)


def _checked_workflow(path: str, overrides: Sequence[str]) -> WorkflowSpec:
    """The workflow at ``path`` with ``overrides``, validated and checked as ``run`` checks
    it before any work (:meth:`WorkflowSpec.check`, the workflow file protected from
    being the store); an error names the file and the
    ``--set`` that gave a key it names."""
    from dparallel.config import TOP_LEVEL, named_overrides
    from dparallel.errors import ConfigError
    from dparallel.workflow.spec import load_workflow

    spec = load_workflow(path, overrides)
    try:
        spec.check(protect=(path,))
    except ConfigError as exc:
        said = named_overrides(TOP_LEVEL, str(exc), overrides)
        origin = "".join(f" (--set {item})" for item in said)
        raise ConfigError(f"{path}: {exc}{origin}") from None
    return spec


def run(args: argparse.Namespace) -> int:
    """Load the workflow and run it."""
    spec = _checked_workflow(args.workflow, args.overrides)
    if args.device is not None and spec.training is not None:
        training = spec.training.model_copy(update={"device": args.device})
        spec = spec.model_copy(update={"training": training})
    return execute(spec, args, protect=(args.workflow,))


def demo(args: argparse.Namespace) -> int:
    """Run the packaged quickstart workflow, checked as ``run`` checks a workflow."""
    from dparallel.workflow.spec import QUICKSTART

    return execute(_checked_workflow(str(QUICKSTART), args.overrides), args)


def validate(args: argparse.Namespace) -> int:
    """Validate; print 'ok' or the validated document."""
    spec = _checked_workflow(args.workflow, args.overrides)
    print(json.dumps(spec.to_dict(), indent=1) if args.json else f"{args.workflow}: ok")
    return 0


def schema(args: argparse.Namespace) -> int:
    """Print the JSON schema of workflow files."""
    from dparallel.workflow.spec import workflow_schema

    print(json.dumps(workflow_schema(), indent=1))
    return 0
