"""Shared ``--scheduler`` / ``--scheduler-file`` / ``--local N`` options."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options that choose where tasks run."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--scheduler", metavar="ADDR", help="existing Dask scheduler, e.g. tcp://host:8786"
    )
    where.add_argument("--scheduler-file", metavar="FILE", help="Dask scheduler file")
    where.add_argument(
        "--local", type=int, metavar="N", help="start a local cluster of N worker processes"
    )
    parser.add_argument(
        "--torch-threads", type=int, default=None, help="torch threads per task (default 1)"
    )


def cluster_kwargs(args: argparse.Namespace, spec: Any = None) -> dict[str, Any]:
    """Keyword arguments for :func:`dparallel.cluster.connect` from the parsed options."""
    from dparallel.cluster import ClusterSpec

    if args.local is not None:
        base = spec.model_dump() if spec is not None else {}
        base.update(kind="local", n_workers=args.local)
        spec = ClusterSpec(**base)
    return {"cluster": spec, "scheduler": args.scheduler, "scheduler_file": args.scheduler_file}


def print_dashboard(handle: Any) -> None:
    """Print where the Dask dashboard (and the dparallel page) is."""
    link = handle.dashboard_link
    if link:
        print(f"dashboard: {link}", file=sys.stderr, flush=True)
