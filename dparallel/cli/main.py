"""``dparallel`` command: one sub-command per module listed in :data:`COMMANDS`.

Each listed module defines ``add_parser(subparsers) -> argparse.ArgumentParser`` and
``run(args) -> int``; the parser gets ``func=run`` set here.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from dparallel.errors import DParallelError

#: Dask's own setting for the level of the ``distributed`` loggers.
ENV_DASK_LOG_LEVEL = "DASK_LOGGING__DISTRIBUTED"
#: Sub-command modules, in the order ``--help`` lists them.
COMMANDS: tuple[str, ...] = (
    "dparallel.cli.run",
    "dparallel.cli.demo",
    "dparallel.cli.ingest",
    "dparallel.cli.featurize",
    "dparallel.cli.train",
    "dparallel.cli.export",
    "dparallel.cli.evaluate",
    "dparallel.cli.info",
    "dparallel.cli.validate",
    "dparallel.cli.schema",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every sub-command."""
    from dparallel import __version__

    parser = argparse.ArgumentParser(
        prog="dparallel",
        description="Featurize atomic structures in parallel into zarr and train potentials.",
    )
    parser.add_argument("--version", action="version", version=f"dparallel {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(name)
        sub_parser = module.add_parser(sub)
        sub_parser.set_defaults(func=module.run)
    return parser


def _dask_log_level(verbose: int) -> None:
    """Dask logs INFO from the scheduler, nannies and workers by default: only with ``-v``.

    Set through the environment (unless the user set it) so that worker processes started
    from here inherit it, and on the logger in case ``distributed`` is already imported.
    """
    level = os.environ.setdefault(ENV_DASK_LOG_LEVEL, "info" if verbose else "warning")
    if "distributed" in sys.modules:
        logging.getLogger("distributed").setLevel(level.upper())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (2 for dparallel errors)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
    )
    _dask_log_level(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except DParallelError as exc:
        print(f"dparallel {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dparallel {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
