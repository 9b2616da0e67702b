"""``dparallel validate WORKFLOW``: check a workflow file without running anything."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``validate`` sub-command."""
    p = subparsers.add_parser("validate", help="validate a workflow file (exit 2 if invalid)")
    p.add_argument("workflow", help="workflow YAML")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="K=V")
    p.add_argument("--json", action="store_true", help="print the validated workflow as JSON")
    return p


def run(args: argparse.Namespace) -> int:
    """Validate; print 'ok' or the validated document."""
    from dparallel.workflow.spec import load_workflow

    spec = load_workflow(args.workflow, args.overrides)
    spec.check_locations()  # a URL needs its client (and, for the store, conditional writes)
    print(json.dumps(spec.to_dict(), indent=1) if args.json else f"{args.workflow}: ok")
    return 0
