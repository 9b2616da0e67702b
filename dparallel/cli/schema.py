"""``dparallel schema``: print the JSON schema of workflow files."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``schema`` sub-command."""
    return subparsers.add_parser("schema", help="print the workflow JSON schema")


def run(args: argparse.Namespace) -> int:
    """Print the schema."""
    from dparallel.workflow.spec import workflow_schema

    print(json.dumps(workflow_schema(), indent=1))
    return 0
