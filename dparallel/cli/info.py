"""``dparallel info STORE [--json]``: what a store holds and whether it is complete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> None:
    """Register the ``info`` sub-command."""
    p = subparsers.add_parser("info", help="summarise a dparallel store")
    p.add_argument("store", help="the store: a directory or a URL (s3://bucket/data.zarr)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the store summary (text table or JSON)."""
    from dparallel.store import open_store  # zarr: only when the command runs

    info = open_store(args.store).info()
    if args.json:
        from dparallel._files import strict_json

        # NaN: a statistic that is not defined (the sigma of a constant function)
        print(strict_json(info, indent=2, what="info --json", missing=True, sort_keys=True))
        return 0
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
    return 0
