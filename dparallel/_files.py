"""The one way dparallel writes a file of its own: a new file, renamed into place.

Every file dparallel writes itself (store chunks and documents of the direct writer, model
files, checkpoints, exports, n2p2 files, metrics, the run's log) is written here; what a
storage library writes for us (zarr, icechunk, an object-store client) stays with it.
``tests/test_write_path.py`` fails on any other module that opens a file for writing.

* **Never write into an existing file.** The bytes go to a new file beside the target,
  created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (``<name>.<32 hex>.partial``, the name
  zarr gives its temporary files, so a store's ownership check knows it), then renamed
  over the target: a link at the target is replaced, never written through.
* **Never leave our folder through a link.** With ``root=`` (the store, the model
  directory), every folder between ``root`` and the target must be a real folder
  (:func:`refuse_links`); :class:`~dparallel.errors.UnsafePathError` otherwise.
* **Durable where it counts.** ``durable=True`` fsyncs the file before the rename and the
  folder after it. Files written many at a time (a partition's chunks) use
  ``pending=True`` and are made durable together by :func:`sync_pending` before the
  partition's done marker: one ``syncfs`` on Linux, else their fsyncs issued at once. The
  marker needs no sync of its own: lost in a crash, the partition is computed again.
* **A full disk is one error.** ``ENOSPC``/``EDQUOT`` becomes
  :class:`~dparallel.errors.DiskFullError` naming the target and the bytes it needed; the
  temporary file is removed.

A log is appended to, not replaced: :func:`open_log` appends only to a log dparallel
created (it starts with :data:`LOG_MARKER`) or an empty file, never through a link, never
to a file with other names (hard links), and creates its missing folders;
:func:`check_log_target` refuses anything else (and a path below a file) before a run
starts.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import secrets
import stat
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypedDict, Unpack

from dparallel.errors import DiskFullError, UnsafePathError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    _Needed = int | Callable[[], int | None] | None  # bytes a write needed, or how to count them

__all__ = [
    "LOG_MARKER",
    "ClaimRules",
    "check_claimable",
    "check_log_target",
    "claim_directory",
    "file_in_the_way",
    "is_dparallel_log",
    "new_file",
    "open_log",
    "raise_if_disk_full",
    "refuse_links",
    "remove_file",
    "restore_in_place",
    "sample_names",
    "strict_json",
    "sync_pending",
    "temporary_name",
    "write_file",
    "write_serialized",
    "write_with",
]

#: First line of every log file dparallel creates: what :func:`open_log` appends to.
LOG_MARKER = "# dparallel log: Dask and worker records of dparallel runs\n"
#: A record line of :data:`dparallel.cluster.logs.FORMAT` (logs written before the marker).
_RECORD = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \d+ \S+ [A-Z]+: ")
_FULL = (errno.ENOSPC, errno.EDQUOT)

#: What the error of a full disk tells the user to do. A command whose plain rerun would
#: not keep the finished work (``dparallel train`` without ``--resume`` trains anew) says
#: its own with :func:`full_disk_error`.
FULL_DISK_ADVICE = "free some space and rerun the same command (finished work is kept)"
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

_PENDING: set[str] = set()  # files written with pending=True, not yet fsynced
_PENDING_LOCK = threading.Lock()


def temporary_name(path: Path) -> Path:
    """A fresh temporary name beside ``path``: ``<name>.<32 hex>.partial``."""
    return path.with_name(f"{path.name}.{secrets.token_hex(16)}.partial")


def refuse_links(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Raise :class:`UnsafePathError` if a folder between ``root`` and ``path`` (``path``
    included, ``root`` excluded) is a symbolic link; parts that do not exist yet pass."""
    root, path = Path(root), Path(path)
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise UnsafePathError(f"refusing to write {path}: it is not inside {root}") from None
    here = root
    for part in parts:
        if part in ("..", ""):
            raise UnsafePathError(f"refusing to write {path}: it leaves {root}")
        here = here / part
        try:
            if os.path.islink(here):
                raise UnsafePathError(
                    f"refusing to write {path}: {here} is a symbolic link out of {root} "
                    f"(to {os.readlink(here)}); dparallel never writes through links. Remove "
                    "the link, or choose another output path"
                )
        except OSError:
            return


def _full_code(exc: BaseException) -> int:
    """``ENOSPC``/``EDQUOT`` if ``exc`` is a full disk underneath (torch's C++ writer says so
    only in text), else 0."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _FULL:
            return exc.errno
        text = str(exc).lower()
        if "no space left" in text or "disk quota" in text or "file write failed" in text:
            return errno.ENOSPC
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return 0


def full_disk_error(exc: OSError, advice: str) -> DiskFullError | None:
    """``exc`` as one :class:`DiskFullError` that says ``advice`` instead of
    :data:`FULL_DISK_ADVICE`; ``None`` if ``exc`` is not a full disk."""
    if exc.errno not in _FULL:
        return None
    if isinstance(exc, DiskFullError):
        text = str(exc).removesuffix(f"; {FULL_DISK_ADVICE}")
        path, needed = exc.path, exc.needed
    else:
        where = f": {exc.filename}" if exc.filename else ""
        text, path, needed = f"{exc.strerror or exc}{where}", exc.filename, None
    return DiskFullError(f"{text}; {advice}", path=path, needed=needed, code=exc.errno)


@contextlib.contextmanager
def _replacing(tmp: Path, path: Path, needed: _Needed = None) -> Iterator[None]:
    """Remove ``tmp`` if the block fails; its error names ``path`` (a full disk: one
    :class:`DiskFullError`, with the bytes ``needed``)."""
    try:
        yield
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise_if_disk_full(exc, path, needed)
        if isinstance(exc, OSError) and exc.filename == str(tmp):  # the file meant, not ours
            exc.filename = str(path)
        raise


def raise_if_disk_full(exc: BaseException, path: str | os.PathLike[str], needed: _Needed) -> None:
    """Raise ``exc`` as one :class:`DiskFullError` naming ``path`` if a full disk is under it."""
    if not (code := _full_code(exc)):
        return
    size = needed() if callable(needed) else needed
    amount = f"{size:,} bytes" if size is not None else "more space"
    what = "over quota" if code == errno.EDQUOT else "no space left on the device"
    raise DiskFullError(
        f"{path}: {what} (needed {amount}); {FULL_DISK_ADVICE}", path=path, needed=size, code=code
    ) from None


def _fsync_folder(folder: Path) -> None:
    """fsync a folder (its entries: a rename made durable); ignored where unsupported."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_path(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _finish(tmp: Path, path: Path, durable: bool, pending: bool) -> None:
    """Rename ``tmp`` over ``path`` (and make the rename durable or pending)."""
    os.replace(tmp, path)
    if durable:
        _fsync_folder(path.parent)
    elif pending:
        with _PENDING_LOCK:
            _PENDING.add(os.fspath(path))


def write_file(
    path: str | os.PathLike[str],
    data: bytes | bytearray | memoryview | str,
    *,
    root: str | os.PathLike[str] | None = None,
    durable: bool = False,
    pending: bool = False,
) -> None:
    """Write ``data`` to ``path`` as a new file renamed into place (see module docstring).

    ``root``: the folder ``path`` must not leave through a link. ``durable``: on disk
    before this returns. ``pending``: fsynced by the next :func:`sync_pending`.
    """
    path = Path(path)
    if root is not None:
        refuse_links(root, path.parent)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = temporary_name(path)
    with _replacing(tmp, path, len(raw)):
        fd = os.open(tmp, _NEW, 0o644)
        try:
            view = memoryview(raw).cast("B")
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        _finish(tmp, path, durable, pending)


@contextlib.contextmanager
def new_file(
    path: str | os.PathLike[str],
    mode: str = "wb",
    *,
    root: str | os.PathLike[str] | None = None,
    durable: bool = False,
    newline: str | None = None,
) -> Iterator[IO[Any]]:
    """A file object writing a new file that replaces ``path`` when the block ends.

    ``mode``: ``"wb"`` or ``"w"`` (UTF-8 text). If the block raises,
    nothing replaces ``path`` and the temporary file is removed.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"new_file writes a new file: mode 'w' or 'wb', not {mode!r}")
    path = Path(path)
    if root is not None:
        refuse_links(root, path.parent)
    tmp = temporary_name(path)
    written = 0
    with _replacing(tmp, path, lambda: written or None):
        fd = os.open(tmp, _NEW, 0o644)
        if mode == "wb":
            handle: IO[Any] = os.fdopen(fd, "wb")
        else:
            handle = os.fdopen(fd, "w", encoding="utf-8", newline=newline)
        with handle:
            yield handle
            handle.flush()
            written = os.fstat(handle.fileno()).st_size
            if durable:
                os.fsync(handle.fileno())
        _finish(tmp, path, durable, False)


def write_with(
    path: str | os.PathLike[str],
    writer: Callable[[Path], Any],
    *,
    root: str | os.PathLike[str] | None = None,
    durable: bool = True,
    suffix: str = "",
) -> None:
    """For a library that writes to a path (``torch.export.save``, ``ase.io.write``): it
    writes a new, empty temporary file made here (ending in ``suffix`` where the library
    needs one), which then replaces ``path`` (fsynced first when ``durable``)."""
    path = Path(path)
    if root is not None:
        refuse_links(root, path.parent)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(16)}.partial{suffix}")
    with _replacing(tmp, path):
        os.close(os.open(tmp, _NEW, 0o644))
        writer(tmp)
        if os.path.islink(tmp) or not tmp.is_file():
            raise UnsafePathError(f"refusing to write {path}: its writer left no plain file")
        if durable:
            _fsync_path(os.fspath(tmp))
        _finish(tmp, path, durable, False)


def write_serialized(
    path: str | os.PathLike[str],
    serialize: Callable[[IO[bytes]], Any],
    *,
    root: str | os.PathLike[str] | None = None,
    durable: bool = True,
) -> None:
    """For a library that writes to a file object (``torch.save``, ``torch.jit.save``,
    ``torch.export.save``): its bytes made in memory, then written by :func:`write_file`.
    torch's own C++ file writer aborts the whole process on a full disk; here a full disk is
    one :class:`DiskFullError` and nothing is left behind."""
    buffer = io.BytesIO()
    serialize(buffer)
    write_file(path, buffer.getbuffer(), root=root, durable=durable)


def remove_file(
    path: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None
) -> None:
    """Remove the file ``path`` (a link itself, never its target) if it is there."""
    path = Path(path)
    if root is not None:
        refuse_links(root, path.parent)
    if path.is_dir() and not path.is_symlink():
        raise UnsafePathError(f"refusing to remove {path}: it is a folder, not a file")
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _syncfs(folder: str) -> bool:
    """``syncfs`` of the filesystem holding ``folder`` (Linux); False where unavailable."""
    from dparallel._libc import c_library

    call = getattr(c_library(), "syncfs", None)
    if call is None:
        return False
    fd = os.open(folder, os.O_RDONLY)
    try:
        return bool(call(fd) == 0)
    finally:
        os.close(fd)


def restore_in_place(path: str | os.PathLike[str], data: bytes) -> None:
    """Put back the bytes of a file of ours that a library rewrote in place (zarr's root
    document) when a new file does not fit (a full disk: the blocks the library freed are
    the only room). Only a plain file with one name, opened without following a link; the
    one write into an existing file dparallel makes."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise UnsafePathError(f"refusing to rewrite {path}: not a plain file of one name")
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.pwrite(fd, view, len(data) - len(view)) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_pending(paths: Iterable[str | os.PathLike[str]] = ()) -> None:
    """fsync every file written with ``pending=True`` since the last call (and ``paths``),
    then their folders, once each: what a done marker declares is on disk before it."""
    with _PENDING_LOCK:
        files = set(_PENDING) | {os.fspath(p) for p in paths}
        _PENDING.clear()
    folders = sorted({os.path.dirname(name) for name in files})
    if len(files) < 4:
        for name in sorted(files):
            _fsync_path(name)
        for folder in folders:
            _fsync_folder(Path(folder))
        return
    with contextlib.suppress(OSError):  # one filesystem: one syncfs covers every file
        if len({os.stat(f).st_dev for f in folders}) == 1 and _syncfs(folders[0]):
            return  # one flush of that filesystem: the cheapest batch (docs/reliability.md)
    # issued together: the filesystem commits them in fewer journal writes (on ext4 on a
    # virtual disk, 30 files in about a third of the time one after another)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(16, len(files))) as pool:
        list(pool.map(_fsync_path, sorted(files)))
        list(pool.map(_fsync_folder, [Path(f) for f in folders]))


def _log_is_ours(fd: int) -> bool:
    """Whether the file open at ``fd`` (readable) is empty or a dparallel log."""
    head = os.pread(fd, 256, 0)
    return not head or head.startswith(LOG_MARKER.encode()) or bool(_RECORD.match(head))


def is_dparallel_log(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a non-empty log file dparallel wrote (a plain file, not a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        return os.fstat(fd).st_size > 0 and _log_is_ours(fd)
    finally:
        os.close(fd)


def file_in_the_way(path: str | os.PathLike[str]) -> Path | None:
    """The folder above ``path`` that is a file (where ``mkdir(parents=True)`` says "Not a
    directory"), or ``None``: the one check of every output path (a store, an output
    folder, the log) before a run writes anything."""
    return next((p for p in Path(path).parents if p.exists() and not p.is_dir()), None)


def _refuse_log(path: Path, why: str) -> UnsafePathError:
    return UnsafePathError(
        f"refusing to write the log to {path}: {why}; dparallel appends only to its own "
        "log files (or an empty file): choose another --log-file"
    )


def check_log_target(path: str | os.PathLike[str]) -> Path:
    """Raise :class:`UnsafePathError` unless :func:`open_log` may append to ``path`` (or
    create it, with its missing folders); returns it absolute. Nothing is created."""
    path = Path(path).absolute()
    if (in_the_way := file_in_the_way(path)) is not None:  # open_log would write nothing
        raise UnsafePathError(
            f"refusing to write the log to {path}: {in_the_way} is a file, not a folder; "
            "choose another --log-file"
        )
    if os.path.islink(path):
        raise _refuse_log(path, "it is a symbolic link")
    if not os.path.lexists(path):
        return path
    if path.is_dir():
        raise _refuse_log(path, "it is a folder")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise _refuse_log(path, exc.strerror or str(exc)) from None
    try:
        _check_log_fd(path, fd)
    finally:
        os.close(fd)
    return path


def _check_log_fd(path: Path, fd: int) -> None:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise _refuse_log(path, "it is not a plain file")
    if info.st_nlink > 1:
        raise _refuse_log(path, "it has other names (hard links)")
    if not _log_is_ours(fd):
        raise _refuse_log(path, "it is a file of yours, not a dparallel log")


def open_log(path: str | os.PathLike[str]) -> IO[str]:
    """A text stream appending to the log at ``path``: created (with :data:`LOG_MARKER`,
    and its missing folders) if absent, else only if :func:`check_log_target` accepts it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_APPEND | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, LOG_MARKER.encode())
    except FileExistsError:
        try:
            fd = os.open(path, flags | os.O_RDWR)
        except OSError as exc:
            raise _refuse_log(path, exc.strerror or str(exc)) from None
        try:
            _check_log_fd(path, fd)
        except BaseException:
            os.close(fd)
            raise
    return os.fdopen(fd, "a", encoding="utf-8")


def _plain(obj: Any) -> Any:
    """numpy scalars and arrays as Python numbers and lists (what ``json`` writes)."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _finite(obj: Any, what: str, missing: bool, where: str = "") -> Any:
    """``obj`` (JSON values) with every non-finite number ``None`` where ``missing``, else a
    :class:`~dparallel.errors.NonFiniteError` naming the first one's key."""
    import math

    if isinstance(obj, float) and not math.isfinite(obj):
        if missing:
            return None
        from dparallel.errors import NonFiniteError

        raise NonFiniteError(
            f"{what}: {where or 'the value'} is not a finite number; JSON cannot hold NaN or "
            "infinity (the model or data behind it is broken: check the training log)"
        )
    if isinstance(obj, dict):
        return {
            k: _finite(v, what, missing, f"{where}.{k}" if where else str(k))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_finite(v, what, missing, f"{where}[{i}]") for i, v in enumerate(obj)]
    return obj


def strict_json(
    obj: Any,
    *,
    indent: int | None = None,
    what: str = "JSON output",
    missing: bool = False,
    sort_keys: bool = False,
) -> str:
    """``json.dumps`` that refuses NaN and infinities (they are not JSON): a
    :class:`~dparallel.errors.NonFiniteError` naming the key instead. ``missing``: a
    non-finite number means "not measured" here (a validation loss without a validation
    set) and is written as ``null``."""
    import json

    plain = json.loads(json.dumps(obj, default=_plain))  # numpy values as Python numbers
    plain = _finite(plain, what, missing)
    return json.dumps(plain, indent=indent, allow_nan=False, sort_keys=sort_keys)


def sample_names(names: Iterable[str], most: int = 5) -> str:
    """``names`` sorted, the first ``most`` of them joined (``… and N more``): for messages."""
    shown = sorted(names)
    text = ", ".join(shown[:most])
    return text + (f" and {len(shown) - most} more" if len(shown) > most else "")


def _aliases(target: Path, protect: Iterable[str | os.PathLike[str]]) -> str | None:
    """Why the output folder ``target`` (resolved) would alias an input, or ``None``."""
    for item in protect:
        given = Path(item).expanduser().absolute()
        other = given.resolve()
        if other == target:
            return f"it is {given}, which this run reads"
        if target in other.parents:
            return f"it holds {given}, which this run reads"
        if other in target.parents:
            return f"it lies inside {given}, which this run reads"
    return None


class ClaimRules(TypedDict, total=False):
    """What :func:`claim_directory` is also told: ``protect``, the inputs of the run;
    ``adopt(entries)``, whether a folder without the marker is one dparallel wrote."""

    protect: Iterable[str | os.PathLike[str]]
    adopt: Callable[[set[str]], bool] | None


def check_claimable(
    path: str | os.PathLike[str], marker: str, what: str, **rules: Unpack[ClaimRules]
) -> bool:
    """Raise :class:`~dparallel.errors.UnsafePathError` where :func:`claim_directory`
    would refuse ``path`` (same arguments), creating nothing; returns whether it carries
    ``marker`` already."""
    given = Path(path).expanduser()
    target = given.resolve()
    root = "it is the filesystem root" if target == target.parent else None
    why = _aliases(target, rules.get("protect", ())) or root
    if why is None and os.path.lexists(given) and not target.is_dir():
        why = "it is a file, not a folder; choose another output directory"
    if why is None and (in_the_way := file_in_the_way(target)) is not None:
        why = f"{in_the_way} is a file, not a folder; choose another output directory"
    entries = set(os.listdir(target)) if why is None and target.is_dir() else set()
    if marker in entries and (os.path.islink(target / marker) or not (target / marker).is_file()):
        why = f"its {marker} is not a plain file"
    elif (
        marker not in entries and entries and not ((adopt := rules.get("adopt")) and adopt(entries))
    ):
        why = (
            f"it holds files dparallel did not write ({sample_names(entries)}); a {what} "
            "folder must be new, empty or one dparallel made: choose another output directory"
        )
    if why is not None:
        raise UnsafePathError(f"refusing to write a {what} into {given}: {why}")
    return marker in entries


def claim_directory(
    path: str | os.PathLike[str], marker: str, what: str, **rules: Unpack[ClaimRules]
) -> bool:
    """Make ``path`` an output folder of ours, or refuse (:func:`check_claimable`); returns
    whether it was created. A folder is ours when it is new, empty, or carries our
    ``marker`` file (a plain file, not a link) written the first time; ``adopt(entries)``
    may accept a folder dparallel wrote before markers existed. Anything else, a file at
    ``path`` and a folder that is, holds or lies inside a ``protect`` path (an input of
    the run) is refused."""
    import json
    import time

    created = not os.path.lexists(target := Path(path).expanduser())
    if check_claimable(path, marker, what, **rules):
        return False
    (target := target.resolve()).mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_file(target / marker, json.dumps({"kind": what, "created": stamp}) + "\n", durable=True)
    return created
