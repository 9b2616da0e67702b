"""``dparallel`` command: the sub-commands of the modules listed in :data:`COMMANDS`.

Each listed module defines ``add_parser(subparsers)``, which adds its sub-commands, each
with ``func`` (``func(args) -> int`` runs it) as a default.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import signal
import sys
import threading
import warnings
from typing import TYPE_CHECKING, Any, NoReturn

from dparallel._exit import exit_now
from dparallel._files import FULL_DISK_ADVICE, LOG_MARKER, is_dparallel_log
from dparallel.cli._interrupts import interrupts_kept
from dparallel.config import require_home
from dparallel.errors import DParallelError, RunInterruptedError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

#: Dask's own setting for the level of the ``distributed`` loggers.
ENV_DASK_LOG_LEVEL = "DASK_LOGGING__DISTRIBUTED"
#: Exit code when stdout's reader went away (128 + SIGPIPE, as the shell reports it).
CLOSED_PIPE = 141
#: Python warning filters for the processes a command starts (``PYTHONWARNINGS``): the
#: resource tracker's note, at exit, that it cleans up the semaphores of workers their
#: cluster ended ("leaked semaphore objects"), which has no dparallel line to point at.
CHILD_WARNING_FILTERS = ("ignore::UserWarning:multiprocessing.resource_tracker",)
#: Sub-command modules, in the order ``--help`` lists their commands.
COMMANDS: tuple[str, ...] = (
    "dparallel.cli.run",
    "dparallel.cli.ingest",
    "dparallel.cli.featurize",
    "dparallel.cli.train",
    "dparallel.cli.export",
    "dparallel.cli.evaluate",
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
        importlib.import_module(name).add_parser(sub)
    for command in sub.choices.values():  # also after the command: `dparallel info S -v`
        command.add_argument(
            "-v", "--verbose", action="count", default=argparse.SUPPRESS, help="more logging"
        )
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, with an unknown option after a command said by that command's
    parser (``dparallel info: error: unrecognized arguments: …`` and its usage, exit 2),
    not by the top-level one, whose usage lists no option of the command."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        command = commands.choices.get(getattr(args, "command", None) or "", parser)
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


class CommandFormatter(logging.Formatter):
    """A log record as ``dparallel <command>: warning: <message>``, as :func:`warning_lines`
    shows a Python warning and :func:`main` an error (``-v`` shows each record's logger)."""

    def __init__(self, command: str | None) -> None:
        super().__init__()
        self.prefix = f"dparallel {command}" if command else "dparallel"

    def format(self, record: logging.LogRecord) -> str:
        level = "warning" if record.levelno < logging.ERROR else "error"
        return f"{self.prefix}: {level}: {super().format(record)}"


def _console_logging(verbose: int, command: str | None) -> None:
    """Log records on stderr: warnings only, as ``dparallel <command>: warning: …``
    (:class:`CommandFormatter`); with ``-v`` also INFO (``-vv`` DEBUG), each with its
    level and logger. A handler the root logger has already (a host program's) is kept."""
    before = set(logging.getLogger().handlers)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not verbose:
        for handler in set(logging.getLogger().handlers) - before:  # its own, if it made one
            handler.setFormatter(CommandFormatter(command))


def _dask_log_level(verbose: int) -> None:
    """Dask's INFO logs only with ``-v``: through the environment (unless the user set it),
    which worker processes inherit, and on the logger if ``distributed`` is imported."""
    level = os.environ.setdefault(ENV_DASK_LOG_LEVEL, "info" if verbose else "warning")
    if "distributed" in sys.modules:
        logging.getLogger("distributed").setLevel(level.upper())


def _child_warning_filters() -> None:
    """Add :data:`CHILD_WARNING_FILTERS` to ``PYTHONWARNINGS`` (after the user's, so they
    win for their messages only), for every process started from here on."""
    given = [f for f in os.environ.get("PYTHONWARNINGS", "").split(",") if f]
    wanted = given + [f for f in CHILD_WARNING_FILTERS if f not in given]
    if wanted != given:
        os.environ["PYTHONWARNINGS"] = ",".join(wanted)


def _error_line(command: str, text: str, log_file: str | None) -> str:
    """``dparallel <command>: error: …``, pointing at the log file when it has details."""
    first, _, rest = text.partition("\n")
    if log_file and is_dparallel_log(log_file) and os.path.getsize(log_file) > len(LOG_MARKER):
        first = f"{first} (details: {log_file})"
    return f"dparallel {command}: error: {first}" + (f"\n{rest}" if rest else "")


def _os_error(exc: OSError) -> str:
    """One line for an OS error, with what to do about a full disk."""
    where = f": {exc.filename}" if exc.filename else ""
    text = f"{exc.strerror or exc}{where}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        text += f"; {FULL_DISK_ADVICE}"
    return text


def _closed_pipe() -> int:
    """The reader of stdout went away (``dparallel schema | head``): end quietly, further
    output to ``/dev/null`` (the final flush cannot fail again), with SIGPIPE's code."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return CLOSED_PIPE


def warning_lines(command: str) -> Callable[[], None]:
    """Show each Python warning once as ``dparallel <command>: warning: <message>`` on
    stderr (the source line and category are in ``-v`` logging); returns the undo."""
    seen: set[str] = set()
    previous = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        text = " ".join(str(message).split()) or category.__name__
        if text in seen:
            return
        seen.add(text)
        logging.getLogger("dparallel.warnings").debug("%s (%s:%d)", text, filename, lineno)
        print(f"dparallel {command}: warning: {text}", file=sys.stderr, flush=True)

    warnings.showwarning = show

    def undo() -> None:
        if warnings.showwarning is show:
            warnings.showwarning = previous

    return undo


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM ends a run like Ctrl-C: clusters closed, leases released, one line."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code.

    0: done; 1: a check found a problem (``info --verify``, an ``export`` route); 2: a
    usage error (as argparse: no command, an unknown option), a dparallel error, a full
    disk or another OS error (one line, no traceback); 130: interrupted (Ctrl-C or
    SIGTERM), after saying what is kept; 141: stdout was closed by its reader (nothing said).
    """
    parser = build_parser()
    args = _parse(parser, argv)
    _console_logging(args.verbose, getattr(args, "command", None))
    _dask_log_level(args.verbose)
    _child_warning_filters()
    if not getattr(args, "func", None):  # a usage error, as argparse's: help on stderr
        parser.print_help(sys.stderr)
        return 2
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    plain_warnings = warning_lines(args.command)
    try:
        require_home()  # before any command imports ASE, which needs one
        with interrupts_kept():  # a Ctrl-C raised inside a GC callback: raised again
            code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        return _closed_pipe()
    except (DParallelError, OSError) as exc:
        text = str(exc) if isinstance(exc, DParallelError) else _os_error(exc)
        print(_error_line(args.command, text, getattr(args, "log_file", None)), file=sys.stderr)
        return 130 if isinstance(exc, RunInterruptedError) else 2
    except KeyboardInterrupt:
        print(f"dparallel {args.command}: error: interrupted", file=sys.stderr)
        return 130
    finally:
        plain_warnings()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        restore = getattr(args, "restore_logging", None)
        if restore is not None:
            restore()


def entry() -> NoReturn:
    """The ``dparallel`` executable: :func:`main`, then exit without interpreter teardown
    (once a command returned, its files are closed and its cluster is down; finalising
    distributed, zarr, numba and torch took 0.5-3 s). An exception escaping :func:`main`
    (a bug) ends the process the usual way, with its traceback."""
    exit_now(main())


if __name__ == "__main__":  # pragma: no cover
    entry()
