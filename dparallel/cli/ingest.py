"""The store commands: ``dparallel ingest INPUT -o STORE.zarr`` (index a structure file and
write it to a store) and ``dparallel info STORE [--json]`` (what a store holds and whether
it is complete)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dparallel.cli._options import add_json_argument, add_source_arguments
from dparallel.cli._progress import refuse_all_skipped, store_line
from dparallel.errors import DParallelError, InputError, InputFormatError, StoreError

if TYPE_CHECKING:
    import argparse

    from dparallel.store import Verification


def add_parser(subparsers: Any) -> None:
    """Register the ``ingest`` and ``info`` sub-commands."""
    p = subparsers.add_parser(
        "ingest",
        help="read a structure file into a zarr store (resumable)",
        description="Read INPUT (extxyz, n2p2 input.data or any ASE format) partition by "
        "partition into a zarr store. Re-running resumes: only partitions not done are written.",
    )
    add_source_arguments(p)
    add_json_argument(p)
    p.set_defaults(func=run)
    p = subparsers.add_parser("info", help="summarise a dparallel store")
    p.add_argument("store", help="the store: a directory or a URL (s3://bucket/data.zarr)")
    add_json_argument(p)
    p.add_argument(
        "--verify",
        action="store_true",
        help="also read and decode every chunk the done partitions should have, listing "
        "what is missing or unreadable, and feature values that are not finite (exit status "
        "1 if anything is); reads the whole store",
    )
    p.set_defaults(func=info)


def run(args: argparse.Namespace) -> int:
    """Run the ingest; prints a one-line summary."""
    from tqdm import tqdm

    from dparallel.store import open_store
    from dparallel.workflow.ingest import IngestOptions, ingest  # zarr: only when it runs

    bar: list[tqdm] = []

    def progress(done: int, total: int) -> None:
        if not bar:  # a terminal bar only (tqdm's disable=None), none with --quiet
            bar.append(tqdm(total=total, desc="ingest", unit="partition",
                            disable=True if args.quiet else None))  # fmt: skip
        bar[0].update(done - bar[0].n)

    options = IngestOptions(
        format=args.format,
        units=args.units or "ase",
        on_error=args.on_error or "raise",
        energy_key=args.energy_key,
        forces_key=args.forces_key,
        partition_atoms=args.partition_atoms,
        overwrite=args.overwrite,
        repair=args.repair,
        progress=progress,
    )
    try:
        result = ingest(args.input, args.output, options)
    except InputFormatError as exc:  # a structure of the file: what is kept, how to go on
        if options.on_error == "skip" or exc.kept_in is None or not _is_store(args.output):
            raise  # or met before this run wrote any partition: the store is not its
        kept = open_store(args.output)
        raise InputError(
            f"{exc}; {args.output} keeps its {kept.n_partitions - len(kept.pending_partitions())} "
            f"done partitions of {kept.n_partitions}: fix the file (then rerun with "
            "--overwrite), or leave such structures out with --on-error skip --overwrite"
        ) from None
    for b in bar:
        b.close()
    print(store_line(result, "written", result.partitions_written, args.json))
    refuse_all_skipped(result, args.input)
    return 0


def _is_store(path: str) -> bool:
    """Whether ``path`` is a dparallel store now (a failed ingest may have made one)."""
    from dparallel.store import open_store

    try:
        open_store(path)
    except DParallelError:
        return False
    return True


def info(args: argparse.Namespace) -> int:
    """Print the store summary (text table or JSON)."""
    from dparallel.store import open_store  # zarr: only when the command runs

    store = open_store(args.store)
    try:
        info = store.info()
    except StoreError as exc:  # a count of a done partition gone: --verify says what else
        if not args.verify:
            raise
        return _verify_only(store.verify(), str(exc), args.json)
    checked = store.verify() if args.verify else None
    if args.json:
        from dparallel._files import strict_json

        if checked is not None:
            info["verify"] = checked.to_dict()
        # NaN: a statistic that is not defined (the sigma of a constant function)
        print(strict_json(info, indent=2, what="info --json", missing=True, sort_keys=True))
        return 0 if checked is None or checked.ok else 1
    src = info["source"]
    print(f"store        {info['path']} (format {info['format_version']})")
    print(f"source       {src.get('path')} ({src.get('format')}, {src.get('size')} bytes)")
    print(f"structures   {info['n_structures']}")
    print(f"atoms        {info['n_atoms']}")
    print(f"elements     {' '.join(info['elements'])}")
    state = "complete" if info["complete"] else "INCOMPLETE"
    print(f"partitions   {info['partitions_done']}/{info['partitions_total']} done ({state})")
    print(f"skipped      {info['n_skipped']}")
    for rec in info["skipped"][:20]:
        print(f"  structure {rec['index']}: {rec['reason']}")
    if info["n_skipped"] > 20:
        print(f"  … {info['n_skipped'] - 20} more (see --json)")
    print("arrays")
    for name, a in info["arrays"].items():
        print(
            f"  {name:28s} {tuple(a['shape'])!s:>18s} {a['dtype']:>10s} chunks {tuple(a['chunks'])}"
        )
    if checked is None:
        return 0
    for line in verify_lines(checked):
        print(line)
    return 0 if checked.ok else 1


def _verify_only(checked: Verification, error: str, as_json: bool) -> int:
    """``info --verify`` of a store whose summary cannot be read: the error, then the
    verification (exit status 1)."""
    if as_json:
        from dparallel._files import strict_json

        print(strict_json({"error": error, "verify": checked.to_dict()}, indent=2,
                          what="info --json", sort_keys=True))  # fmt: skip
        return 1
    print(f"info         cannot be summarised: {error}")
    for line in verify_lines(checked):
        print(line)
    return 1


#: Problems ``info --verify`` lists on a terminal (all of them with ``--json``).
SHOWN_PROBLEMS = 50


def verify_lines(checked: Verification) -> list[str]:
    """``info --verify``'s summary: one line, then each problem (up to :data:`SHOWN_PROBLEMS`)."""
    where = f"{checked.chunks:,} chunks of {checked.partitions} done partitions"
    caveat = (
        ""
        if checked.missing_checked
        else " (a store made before every chunk was stored: a missing chunk may be fill "
        "values, so none is reported)"
    )
    if checked.ok:
        return [f"verify       ok: {where} read, all present and readable{caveat}"]
    kinds = [p.kind for p in checked.problems]
    shown = ("missing", "unreadable", "not finite")[: 3 if "not finite" in kinds else 2]
    counts = ", ".join(f"{kinds.count(kind)} {kind}" for kind in shown)
    damaged = len({p.partition for p in checked.problems if p.partition is not None})
    out = [
        f"verify       FAILED: {counts}, in {damaged} of "
        f"{checked.partitions} done partitions ({where} read){caveat}; the store is damaged: "
        f"{checked.advice}"
    ]
    out += [f"  {p.line()}" for p in checked.problems[:SHOWN_PROBLEMS]]
    if len(checked.problems) > SHOWN_PROBLEMS:
        out.append(f"  … {len(checked.problems) - SHOWN_PROBLEMS} more (see --json)")
    return out
