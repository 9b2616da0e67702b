"""Options and output helpers shared by several sub-commands."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator
    from concurrent.futures import Future

    from dparallel.cluster.spec import ClusterSpec
    from dparallel.io.location import Location


def local_argument(what: str) -> Callable[[str], str]:
    """An argparse ``type`` for an option that names a local file or folder (``what``): a
    URL is refused in one line, never taken for the relative path ``./s3:/…``;
    ``file://`` is dropped."""

    def parse(text: str) -> str:
        import argparse

        from dparallel.io.location import LocationError, require_local_path

        try:
            return str(require_local_path(text, what))
        except LocationError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


#: What a local worker's memory limit is when none is given.
DASK_MEMORY = "Dask's, memory / workers"


def add_cluster_arguments(parser: argparse.ArgumentParser, workflow: bool = False) -> None:
    """Add the options that choose where tasks run (``workflow``: they override a
    workflow's ``cluster`` section, whose keys are then their defaults)."""

    def default(key: str, own: str) -> str:
        return (
            f"default: the workflow's cluster.{key}, else {own}" if workflow else f"default: {own}"
        )

    where = add_scheduler_arguments(parser)
    where.add_argument(
        "--local",
        type=_at_least_one,
        metavar="N",
        help="start a local cluster of N worker processes"
        + (" (instead of the workflow's cluster)" if workflow else ""),
    )
    parser.add_argument(
        "--gpus",
        type=whole_number(0, "GPU worker"),
        metavar="N",
        help="also start N GPU workers in the local cluster, one per GPU (resource GPU=1; "
        f"{default('gpus', '0')})",
    )
    add_torch_threads_argument(
        parser, 1, f"torch threads per task ({default('torch_threads', '1')})"
    )
    parser.add_argument(
        "--memory-limit",
        metavar="BYTES",
        type=_memory_limit,
        help="memory of each local worker: '2GiB', 'auto', bytes (2e9) or a fraction of "
        "memory (0.25); its nanny restarts a worker that uses more "
        f"({default('memory_limit', DASK_MEMORY)})",
    )
    parser.add_argument(
        "--dashboard-address",
        metavar="ADDR",
        help="dashboard of a local cluster (':0' picks a free port; "
        f"{default('dashboard_address', '127.0.0.1:8787')})",
    )
    parser.add_argument(
        "--log-file",
        metavar="PATH",
        type=local_argument("the log file"),
        help="where Dask's logs and worker tracebacks go (default: STORE.log beside a local "
        "store; for a store at a URL, $DPARALLEL_CACHE_DIR/logs/NAME.log)",
    )


def add_scheduler_arguments(parser: argparse.ArgumentParser, use: str = "") -> Any:
    """``--scheduler ADDR`` and ``--scheduler-file FILE``, one or the other, as every
    command that takes them spells them (``use``: what the command does with it); the
    group, for more options that exclude them."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--scheduler", metavar="ADDR", help=f"existing Dask scheduler, e.g. tcp://host:8786{use}"
    )
    where.add_argument("--scheduler-file", metavar="FILE", help=f"Dask scheduler file{use}")
    return where


def add_torch_threads_argument(parser: argparse.ArgumentParser, minimum: int, text: str) -> None:
    """``--torch-threads N`` (at least ``minimum``), as every command that takes it spells it."""
    parser.add_argument(
        "--torch-threads", type=whole_number(minimum, "thread"), metavar="N", help=text
    )


def default_log_file(store: str | Path) -> Path:
    """``STORE.log`` beside a local store; for a URL, ``NAME.log`` in dparallel's cache
    directory (``$DPARALLEL_CACHE_DIR``, default ``~/.cache/dparallel``) under ``logs/``."""
    from dparallel.config import writable_cache_dir
    from dparallel.io.location import as_location

    location = as_location(store)
    if location.local is not None:
        return location.local.with_name(location.name + ".log")
    name = f"{location.protocol}-{location.url.split('://', 1)[1]}.log".replace("/", "_")
    return writable_cache_dir("logs") / name  # a read-only home: the temporary folder


def route_cluster_logs(args: argparse.Namespace, store: str | Path) -> Path:
    """Send Dask's logs of this run to ``--log-file`` (default ``STORE.log``; with ``-v``
    also to the terminal); returns it and sets ``args.log_file``, for error messages.
    The store target is judged first (:func:`refuse_unwritable_target`)."""
    from dparallel.cluster.logs import log_to_file
    from dparallel.errors import UnsafePathError
    from dparallel.io.location import as_location

    local = as_location(store).local  # None for a URL: its log goes to the cache directory
    path = Path(args.log_file or default_log_file(store)).absolute()
    if local is not None and (
        path.resolve() == local.resolve() or local.resolve() in path.resolve().parents
    ):
        raise UnsafePathError(
            f"refusing to write the log to {path}: it is or lies inside the store {store}; "
            "choose another --log-file"
        )
    args.restore_logging = log_to_file(
        path, keep_console=args.verbose > 0, workers=not args.verbose
    )  # refuses a file of the user's (the input): dparallel._files.check_log_target
    args.log_file = str(path)  # error messages point at it only once it is ours
    return path


def refuse_unwritable_target(
    store: str | Path | Location, *, overwrite: bool, protect: tuple[str | Path | None, ...] = ()
) -> None:
    """Refuse a target that no store is ever written over (the filesystem root; a folder
    neither empty nor a store; a URL holding a user's objects or an input), as
    ``create_store`` would, before the command starts anything: a forkserver, a cluster
    whose workers would create the log file beside it, a lease object in a user's prefix."""
    from dparallel.errors import UnsafePathError
    from dparallel.io.location import as_location
    from dparallel.store import refuse_foreign_target

    where = as_location(store)
    local = where.local
    if local is not None and local.resolve().parent == local.resolve():
        raise UnsafePathError(f"refusing to write a store at {store}: it is the filesystem root")
    refuse_foreign_target(
        local if local is not None else where, overwrite, [p for p in protect if p is not None]
    )


def device_option(text: str) -> str:
    """An argparse type: a ``device`` setting (auto, cpu, cuda, cuda:N)."""
    import argparse

    from dparallel.config import check_device

    return check_device(text, argparse.ArgumentTypeError)


def whole_number(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse ``type``: an integer ≥ ``minimum`` (one line of error otherwise, not a
    validation dump or a traceback later); ``what`` names the unit (``worker``)."""

    def parse(text: str) -> int:
        import argparse

        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            unit = what if minimum == 1 else f"{what}s"
            raise argparse.ArgumentTypeError(f"needs at least {minimum} {unit}, got {value}")
        return value

    return parse


_at_least_one = whole_number(1, "worker")


def _memory_limit(text: str) -> str | float:
    """An argparse ``type`` for ``--memory-limit``: what ``cluster.memory_limit`` takes
    (a number is bytes or a fraction), checked by :class:`~dparallel.cluster.ClusterSpec`."""
    import argparse

    from pydantic import ValidationError

    from dparallel.cluster import ClusterSpec

    try:
        value: str | float = float(text)
    except ValueError:
        value = text
    try:
        ClusterSpec(memory_limit=value)
    except ValidationError as exc:
        cause = exc.errors()[0].get("ctx", {}).get("error")
        raise argparse.ArgumentTypeError(str(cause or exc)) from None
    return value


def on_connect(args: argparse.Namespace) -> Callable[[Any], None]:
    """What the CLI does once connected: print the dashboard link (not with ``-q``: quiet
    means quiet); local workers log to file."""

    def connected(handle: Any) -> None:
        if not getattr(args, "quiet", False) and handle.dashboard_link:
            print(f"dashboard: {handle.dashboard_link}", file=sys.stderr, flush=True)
        if handle.source == "local" and getattr(args, "log_file", None) and not args.verbose:
            from dparallel.cluster.logs import WorkerLogFile

            handle.client.register_plugin(WorkerLogFile(args.log_file))

    return connected


@contextlib.contextmanager
def local_forkserver(args: argparse.Namespace, spec: ClusterSpec | None = None) -> Iterator[None]:
    """Start the forkserver of local workers now when this command will start a local
    cluster (``spec``: the workflow's ``cluster:``, ``None``: local; the same decision as
    :func:`dparallel.cluster.connect`'s, :func:`~dparallel.cluster.where.connection_kind`),
    so that its imports and featurize's warm-up overlap the driver's own imports, checks,
    reading and scheduler start (:mod:`dparallel.cluster.forkserver`). The block holds the
    command's checks: one that refuses stops the server again, so that a refused command
    leaves nothing running."""
    from dparallel.cluster.forkserver import start_forkserver, stop_forkserver
    from dparallel.cluster.where import connection_kind
    from dparallel.workflow.featurize_worker_preload import FEATURIZE_FORKSERVER_PRELOAD

    local = _local_by_name(args)
    where = {"scheduler": args.scheduler, "scheduler_file": args.scheduler_file}
    started = connection_kind(None if local else spec, **where) == "local" and start_forkserver(
        (FEATURIZE_FORKSERVER_PRELOAD,), threads=args.torch_threads or 1
    )
    try:
        yield
    except BaseException:
        if started:
            stop_forkserver()
        raise


def _local_by_name(args: argparse.Namespace) -> bool:
    """Whether ``--local N`` was given: a local cluster, even where the environment names a
    scheduler (which :func:`dparallel.cluster.connect` otherwise prefers to the default
    local cluster), so the variable is dropped from this process's environment here, the
    one place the CLI does it, before anything asks :func:`connection_kind`."""
    from dparallel.cluster.forkserver import ENV_SCHEDULER_ADDRESS

    if getattr(args, "local", None) is None:
        return False
    os.environ.pop(ENV_SCHEDULER_ADDRESS, None)
    return True


def connect_early(args: argparse.Namespace, spec: ClusterSpec | None = None) -> Future[Any]:
    """Connect in the background now, for featurize (:func:`dparallel.cluster.
    connect_in_background`; ``spec``: a workflow's ``cluster:``, the options override it):
    a local cluster starts while the command reads its input."""
    from dparallel.cluster import connect_in_background
    from dparallel.workflow.featurize_worker_preload import featurize_connect_options

    where = cluster_kwargs(args, spec)
    return connect_in_background(spec=where.pop("cluster"), **where, **featurize_connect_options())


def cluster_kwargs(args: argparse.Namespace, spec: Any = None) -> dict[str, Any]:
    """Keyword arguments for :func:`dparallel.cluster.connect` from the parsed options."""
    from dparallel.cluster import ClusterSpec
    from dparallel.cluster.where import connection_kind

    gpus = getattr(args, "gpus", None)
    memory = getattr(args, "memory_limit", None)
    if any(x is not None for x in (args.local, args.dashboard_address, gpus, memory)):
        base = spec.model_dump() if spec is not None else {}
        if _local_by_name(args):
            base.update(kind="local", n_workers=args.local)
        if gpus is not None:
            base.update(gpus=gpus)
        if args.dashboard_address is not None:
            base.update(dashboard_address=args.dashboard_address)
        if memory is not None:
            base.update(memory_limit=memory)
        spec = ClusterSpec(**base)
    remote = {"scheduler": args.scheduler, "scheduler_file": args.scheduler_file}
    if memory is not None and (kind := connection_kind(spec, **remote)) != "local":
        from dparallel.errors import ConfigError

        raise ConfigError(
            f"--memory-limit sets the memory of a local cluster's workers, but this run's "
            f"workers are not started here ({kind}): give them theirs where they start "
            "(`dask worker --memory-limit`; a workflow's cluster.slurm.memory)"
        )
    kind = connection_kind(spec, **remote)
    if gpus and kind == "local":  # this machine's GPUs: checked
        from dparallel.cluster.gpus import check_gpus

        check_gpus(gpus)  # refused before the command reads or writes anything
    _warn_local_only(kind, gpus, args.dashboard_address)
    return {"cluster": spec, **remote}


def _warn_local_only(kind: str, gpus: int | None, dashboard: str | None) -> None:
    """Warn that ``--gpus`` / ``--dashboard-address``, which shape a local cluster, do
    nothing where this run's workers are not started here (they were ignored in silence);
    a SLURM cluster's scheduler, started here, takes the dashboard address."""
    if kind == "local":
        return
    import warnings

    if gpus:
        warnings.warn(
            f"--gpus starts GPU workers of a local cluster; this run's cluster is not started "
            f"here ({kind}): its workers that advertise the resource GPU=1 (`dask worker "
            "--resources GPU=1`) take partitions on their GPU, whatever --gpus says",
            stacklevel=3,
        )
    if dashboard is not None and kind != "slurm":  # a SLURM cluster's scheduler runs here
        warnings.warn(
            f"--dashboard-address places a local cluster's dashboard; this run's cluster is "
            f"not started here ({kind}): its scheduler serves its own (`dask scheduler "
            "--dashboard-address`)",
            stacklevel=3,
        )


def add_json_argument(parser: argparse.ArgumentParser, what: str = "the summary") -> None:
    """``--json``: the command's ``what`` as one JSON object on stdout, nothing else there."""
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print {what} as one JSON object (progress and warnings: stderr)",
    )


def add_label_arguments(
    parser: argparse.ArgumentParser, workflow: str = "", first: str = ""
) -> None:
    """``--energy-key`` and ``--forces-key``: where a structure file keeps its labels
    (``workflow``: where else the default comes from, e.g. a workflow's dataset; ``first``:
    where the default comes from before the built-in keys)."""
    for kind, place in (
        ("energy", "extxyz comment-line key (ASE info key)"),
        ("forces", "extxyz Properties column (ASE arrays key)"),
    ):
        also = f"; {workflow} {kind}_key" if workflow else ""
        parser.add_argument(
            f"--{kind}-key",
            metavar="KEY",
            help=f"{place} of the reference {kind}, e.g. dft_{kind} (default: {first}{kind}, "
            f"else REF_{kind}{also})",
        )


def add_source_arguments(parser: argparse.ArgumentParser, name: str = "input") -> None:
    """Positional structure file, ``-o STORE`` and how to read the file and partition it."""
    from dparallel.io.units import UNIT_SYSTEMS

    parser.add_argument(
        name,
        help="structure file (extxyz, n2p2 input.data, each also .gz, .bz2 or .xz; any ASE "
        "format): a path or a URL (s3://bucket/data.extxyz; credentials from AWS_* in the "
        "environment)",
    )
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        help="the store: a directory (e.g. data.zarr) or a URL (s3://bucket/data.zarr)",
    )
    parser.add_argument("--format", help="extxyz, n2p2 or an ASE format (default: guess)")
    parser.add_argument(
        "--units",
        choices=sorted(UNIT_SYSTEMS),
        help="units of the file (default: ase; featurize --workflow: its dataset.units)",
    )
    parser.add_argument(
        "--on-error",
        choices=["raise", "skip"],
        help="default: raise (featurize --workflow: its dataset.on_error)",
    )
    add_label_arguments(parser, "featurize --workflow: its dataset's")
    parser.add_argument(
        "--partition-atoms",
        type=whole_number(1, "atom"),
        metavar="N",
        help="target atoms per partition/task (default: featurize ~4 tasks per worker of "
        "5,000-20,000 atoms, or one per worker for less data; ingest 20,000)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a dparallel store made from another source or config (never anything "
        "that is not a dparallel store)",
    )
    parser.add_argument(
        "--repair",
        action="store_true",
        help="first read every chunk of the store's done partitions (as info --verify) and "
        "compute again those with a chunk missing, unreadable or not finite",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")
