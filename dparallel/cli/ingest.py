"""``dparallel ingest INPUT -o STORE.zarr``: index a structure file and write it to a store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dparallel.cli._options import add_source_arguments

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> None:
    """Register the ``ingest`` sub-command."""
    p = subparsers.add_parser(
        "ingest",
        help="read a structure file into a zarr store (resumable)",
        description="Read INPUT (extxyz, n2p2 input.data or any ASE format) partition by "
        "partition into a zarr store. Re-running resumes: only partitions not done are written.",
    )
    add_source_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the ingest; prints a one-line summary."""
    from tqdm import tqdm

    from dparallel.workflow.ingest import IngestOptions, ingest  # zarr: only when it runs

    bar: list[tqdm] = []

    def progress(done: int, total: int) -> None:
        if not bar:  # a terminal bar only (tqdm's disable=None), none with --quiet
            bar.append(tqdm(total=total, desc="ingest", unit="partition",
                            disable=True if args.quiet else None))  # fmt: skip
        bar[0].update(done - bar[0].n)

    options = IngestOptions(
        format=args.format,
        units=args.units,
        on_error=args.on_error,
        partition_atoms=args.partition_atoms,
        overwrite=args.overwrite,
        progress=progress,
    )
    result = ingest(args.input, args.output, options)
    for b in bar:
        b.close()
    store = result.store
    print(
        f"{store.target}: {store.n_structures} structures, {store.n_atoms} atoms, "
        f"{store.n_partitions} partitions ({result.partitions_written} written, "
        f"{result.partitions_already_done} already done), {len(store.skipped())} skipped, "
        f"{result.seconds:.2f} s"
    )
    return 0
