"""Send Dask's logs (scheduler, nannies, worker tracebacks) to a file instead of the terminal.

A failing task makes every worker log its traceback, a full disk hundreds of such lines:
the terminal should show one error line that says where they are. :func:`log_to_file`
redirects this process's records, :class:`WorkerLogFile` those of every worker of a
local cluster (one file, whole lines appended); a local worker the CLI started routes
itself from its first moment when :data:`ENV_LOG_FILE` names the file
(:func:`route_process_to_log_file`, called by the worker preload).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import WorkerPlugin

from dparallel._files import check_log_target, open_log
from dparallel.config import restore_environ
from dparallel.errors import DParallelError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "ENV_LOG_FILE",
    "FORMAT",
    "WorkerLogFile",
    "log_to_file",
    "route_process_to_log_file",
    "scheduler_loss_said",
]

#: Record format in the log file (time, process, logger, level, message).
FORMAT = "%(asctime)s %(process)d %(name)s %(levelname)s: %(message)s"
#: Loggers whose terminal output the file replaces ("" is the root logger).
_LOGGERS = ("distributed", "tornado", "asyncio", "")
#: The run's log file, for the local worker processes the CLI starts (inherited by them).
ENV_LOG_FILE = "DPARALLEL_LOG_FILE"
_ROUTED: set[str] = set()  # log files this process already sends its records to


def _is_console(handler: logging.Handler) -> bool:
    stream = getattr(handler, "stream", None)
    return (
        isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and stream in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    )


class _FileHandler(logging.StreamHandler):
    """Appends records to a dparallel log file (:func:`dparallel._files.open_log`), opened
    on the first record; silent when it cannot write (the stock handler prints a traceback
    per record, the very terminal noise this module exists to avoid)."""

    def __init__(self, path: str) -> None:
        super().__init__(stream=None)
        self.stream = None
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is None:
            try:
                self.stream = open_log(self.path)
            except (OSError, DParallelError):
                self.handleError(record)
                return
        super().emit(record)

    def close(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            stream, self.stream = self.stream, None
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        super().close()

    def handleError(self, record: logging.LogRecord) -> None:
        self.failed = True


def log_to_file(
    path: str | os.PathLike[str],
    *,
    keep_console: bool = False,
    level: int = logging.INFO,
    workers: bool = False,
) -> Callable[[], None]:
    """Route ``distributed``/``tornado``/``asyncio`` records (and root ones) to ``path``;
    returns a function that undoes all of it.

    Their console handlers are removed unless ``keep_console``. The file is created on the
    first record (an existing file must be a dparallel log or empty, else
    :class:`~dparallel.errors.UnsafePathError`). ``workers``: local workers started from
    here later route theirs there too (:data:`ENV_LOG_FILE`).
    """
    check_log_target(path)  # refused before the run (and before anything here is changed)
    previous_env = os.environ.get(ENV_LOG_FILE)
    if workers:
        os.environ[ENV_LOG_FILE] = os.fspath(Path(path).absolute())
    handler = _FileHandler(os.fspath(Path(path).absolute()))
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(level)
    removed: dict[logging.Logger, list[logging.Handler]] = {}
    silenced: list[logging.Logger] = []
    touched = [logging.getLogger(name) for name in _LOGGERS]
    for logger in touched:
        logger.addHandler(handler)
        if logger is logging.getLogger() or keep_console:
            continue
        removed[logger] = [h for h in logger.handlers if _is_console(h)]
        for h in removed[logger]:
            logger.removeHandler(h)
        if logger.propagate:  # the root logger's console handler would print them
            logger.propagate = False
            silenced.append(logger)

    def restore() -> None:
        for logger in touched:
            logger.removeHandler(handler)
        for logger, handlers in removed.items():
            for h in handlers:
                logger.addHandler(h)
        for logger in silenced:
            logger.propagate = True
        handler.close()
        if workers:
            restore_environ({ENV_LOG_FILE: previous_env})

    return restore


class WorkerLogFile(WorkerPlugin):
    """Worker plugin: this worker process logs (and warns) to ``path``, not to its terminal;
    for local clusters, whose workers share the client's terminal."""

    name = "dparallel-log-file"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    def setup(self, worker: Any) -> None:
        """Redirect this process's log records (and warnings) to the file."""
        _route(self.path)


def _route(path: str) -> None:
    """This process's log records and Python warnings to ``path`` (once per file)."""
    if path in _ROUTED:
        return
    _ROUTED.add(path)
    log_to_file(path)
    logging.captureWarnings(True)
    logging.getLogger("py.warnings").propagate = True


def route_process_to_log_file() -> None:
    """In a worker process: log records and Python warnings to the file that
    :data:`ENV_LOG_FILE` names, from now on (nothing where it is unset)."""
    if path := os.environ.get(ENV_LOG_FILE):
        _route(path)


#: The start of the error distributed's client logs when it gives its lost scheduler up.
_GAVE_UP = "Failed to reconnect to scheduler"


class _LossSaid(logging.Filter):
    """Turns the client's give-up error into a warning saying ``words``."""

    def __init__(self, words: str) -> None:
        super().__init__()
        self.words = words

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith(_GAVE_UP):
            record.msg, record.args = self.words, ()
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


@contextlib.contextmanager
def scheduler_loss_said(words: str) -> Iterator[None]:
    """Inside, a client that gives its lost scheduler up (after its 10 s of reconnecting)
    logs a warning saying ``words`` instead of distributed's error, which reads as the
    end of a command whose work goes on (``train --scheduler``: its dashboard only)."""
    logger = logging.getLogger("distributed.client")
    said = _LossSaid(words)
    logger.addFilter(said)
    try:
        yield
    finally:
        logger.removeFilter(said)
