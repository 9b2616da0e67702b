"""``dparallel ingest INPUT -o STORE.zarr``: index a structure file and write it to a store."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dparallel.io import UNITS
from dparallel.workflow.ingest import DEFAULT_PARTITION_ATOMS, ingest


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``ingest`` sub-command."""
    p = subparsers.add_parser(
        "ingest",
        help="read a structure file into a zarr store (resumable)",
        description="Read INPUT (extxyz, n2p2 input.data or any ASE format) partition by "
        "partition into a zarr store. Re-running resumes: only partitions not done are written.",
    )
    p.add_argument("input", help="structure file")
    p.add_argument("-o", "--output", required=True, help="store directory (e.g. data.zarr)")
    p.add_argument("--format", default=None, help="extxyz, n2p2 or an ASE format (default: guess)")
    p.add_argument("--units", default="ase", choices=sorted(UNITS), help="units of INPUT")
    p.add_argument("--on-error", default="raise", choices=["raise", "skip"])
    p.add_argument(
        "--partition-atoms",
        type=int,
        default=DEFAULT_PARTITION_ATOMS,
        help=f"target atoms per partition (default {DEFAULT_PARTITION_ATOMS})",
    )
    p.add_argument("--overwrite", action="store_true", help="replace a mismatching store")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    return p


def run(args: argparse.Namespace) -> int:
    """Run the ingest; prints a one-line summary."""

    def progress(done: int, total: int) -> None:
        if not args.quiet:
            print(f"\ringest: {done}/{total} partitions", end="", file=sys.stderr, flush=True)

    result = ingest(
        args.input,
        args.output,
        format=args.format,
        units=args.units,
        on_error=args.on_error,
        partition_atoms=args.partition_atoms,
        overwrite=args.overwrite,
        progress=progress,
    )
    if not args.quiet and result.partitions_written:
        print(file=sys.stderr)
    store = result.store
    print(
        f"{store.path}: {store.n_structures} structures, {store.n_atoms} atoms, "
        f"{store.n_partitions} partitions ({result.partitions_written} written, "
        f"{result.partitions_already_done} already done), {len(store.skipped())} skipped, "
        f"{result.seconds:.2f} s"
    )
    return 0
