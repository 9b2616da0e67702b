"""``dparallel demo``: the embedded default workflow (EMT Cu), end to end on a local cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dparallel.cli.run import add_run_arguments, execute

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``demo`` sub-command."""
    p = subparsers.add_parser(
        "demo",
        help="run the embedded quickstart workflow (generates its EMT Cu dataset)",
        description="Same as `dparallel run workflows/quickstart.yaml` with the copy shipped "
        "inside the package: generates EMT Cu data, featurizes on a local cluster, trains, "
        "exports and prints where everything is.",
    )
    add_run_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Run the packaged quickstart workflow."""
    from dparallel.workflow.spec import load_quickstart

    return execute(load_quickstart(args.overrides), args)
