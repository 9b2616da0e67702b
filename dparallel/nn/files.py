"""Reading and writing torch files safely: weights only, atomic writes, clear errors.

Every ``.pt`` file dparallel reads (``model.pt``, ``best.pt``, ``checkpoint.pt``,
``deployed.pt``) goes through :func:`load_torch_file`, i.e. ``torch.load(...,
weights_only=True)``: a file can hold tensors, dicts, lists, numbers and strings, never
objects whose unpickling runs code. So a crafted checkpoint cannot run a command, and a
truncated, corrupt or foreign file is a :class:`~dparallel.errors.TrainingError` naming it:
one that is no zip archive (``torch.save``'s format) is refused unread, and so is one whose
entries fail their CRC-32 (a flipped bit, which torch's reader does not check).
Every floating-point tensor read is finite, or the file is refused
(:class:`~dparallel.errors.NonFiniteError` naming the tensor and index): a model with a
NaN weight is never used. ``.pt2`` archives load without unpickling
(:func:`load_exported_program`).
"""

from __future__ import annotations

import contextlib
import pickle
import re
import threading
import types
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dparallel._files import write_serialized
from dparallel.errors import NonFiniteError, TrainingError

if TYPE_CHECKING:
    import os
    from collections.abc import Iterator

#: The pickle protocol ``torch.load(weights_only=True)`` expects (torch's default for
#: ``torch.save``); a file written with another one reads the same but makes torch warn.
_PICKLE_PROTOCOL = 2


def first_line(exc: BaseException) -> str:
    """``exc``'s type and the first non-blank line of its message (≤ 300 characters)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {(lines[0] if lines else '')[:300]}"


def _refused_global(exc: BaseException) -> str | None:
    """The object ``weights_only`` refused to build (``"GLOBAL posix.system"``), if that was it."""
    match = re.search(r"GLOBAL ([\w.]+)", str(exc))
    if match is not None:
        return f"GLOBAL {match.group(1)}"
    return "a Python object" if "global" in str(exc).lower() else None


def _refusal(path: Path, what: str, refused: str) -> TrainingError:
    return TrainingError(
        f"{path}: refusing to load this {what}: it holds {refused}, not only tensors and "
        "plain data; dparallel never unpickles objects from files"
    )


def _failed_entry(archive: zipfile.ZipFile) -> str | None:
    """The first entry of ``archive`` whose bytes fail their CRC-32 (zipfile checks it at
    the end of each read), ``None`` if none; entries recorded with CRC 0 are not checked:
    torch writes 0 for every entry under ``torch.serialization.set_crc32_options(False)``."""
    for info in archive.infolist():
        if info.CRC == 0:
            continue
        try:
            with archive.open(info) as entry:
                while entry.read(1 << 24):
                    pass
        except zipfile.BadZipFile:
            return info.filename
    return None


def _check_archive(path: Path, what: str) -> None:
    """Refuse, unread, a file that is no zip archive, or whose entries fail their CRC-32
    (torch's reader checks none: a flipped bit loads as another weight or cuts a string)."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = _failed_entry(archive)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
        raise TrainingError(
            f"{path}: cannot read this {what} (truncated or corrupt?): not a torch file"
        ) from None
    if bad is not None:
        raise TrainingError(
            f"{path}: cannot read this {what} (corrupt: its entry {bad} fails its CRC-32 "
            "check); make it again (train, or export for deployed.pt)"
        )


def load_torch_file(
    path: str | os.PathLike[str],
    what: str = "torch file",
    map_location: str | torch.device = "cpu",
) -> dict[str, Any]:
    """``torch.load(path, weights_only=True)`` of a dict, with errors that name the file.

    Tensors are loaded onto ``map_location`` (the CPU unless asked otherwise).

    Raises
    ------
    TrainingError
        The file is missing, truncated or corrupt, holds anything but tensors and plain
        data (refused unread), or is not a dict.
    """
    path = Path(path)
    if not path.is_file():
        raise TrainingError(f"{what} not found: {path}")
    _check_archive(path, what)
    try:
        with warnings.catch_warnings():
            # torch's notice that a file was pickled with another protocol than its default:
            # one it cannot read is an error below, naming the file; no second message
            warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)
            data = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        refused = _refused_global(exc)
        if refused is None and "Unsupported operand" in str(exc) and zipfile.is_zipfile(path):
            raise TrainingError(
                f"{path}: cannot read this {what}: it was pickled with a protocol newer than "
                f"torch's default ({_PICKLE_PROTOCOL}), which the weights-only reader does not "
                "read; save it with torch.save's default protocol"
            ) from None
        if refused is None:  # not a torch archive at all (the legacy pickle reader gave up)
            raise TrainingError(
                f"{path}: cannot read this {what} (truncated or corrupt?): not a torch file"
            ) from None
        raise _refusal(path, what, refused) from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile, KeyError) as exc:
        raise TrainingError(
            f"{path}: cannot read this {what} (truncated or corrupt?): {first_line(exc)}"
        ) from None
    if not isinstance(data, dict):
        raise TrainingError(f"{path}: not a dparallel {what} (it holds a {type(data).__name__})")
    for where, t in _tensors(data):
        bad = ~torch.isfinite(t) if t.is_floating_point() or t.is_complex() else None
        if bad is not None and bool(bad.any()):
            index = tuple(int(i) for i in torch.nonzero(bad)[0].tolist())
            raise NonFiniteError(
                f"{path}: this {what} holds a non-finite number (NaN or infinity) in "
                f"{where or 'a tensor'} at index {index}; the model it holds is broken (a "
                "diverged training?): retrain it, or resume from an earlier checkpoint"
            )
    return data


def _tensors(obj: Any, where: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(key path, tensor) of every tensor in ``obj``'s dicts, lists and tuples."""
    if isinstance(obj, torch.Tensor):
        yield where, obj
    elif isinstance(obj, (dict, list, tuple)):
        for key, value in obj.items() if isinstance(obj, dict) else enumerate(obj):
            yield from _tensors(value, f"{where}.{key}" if where else str(key))


def _on_cpu(obj: Any) -> Any:
    """``obj`` with every tensor (in dicts, lists, tuples) moved to the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _on_cpu(v) for k, v in obj.items()}
    if type(obj) in (list, tuple):  # not subclasses (named tuples, torch.Size): kept as is
        return type(obj)(_on_cpu(v) for v in obj)
    return obj


def save_torch_file(obj: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """``torch.save`` to a new temporary file, fsynced, then renamed into place: a crash
    never leaves half a file, a link at ``path`` is replaced, never written through, and a
    full disk is one :class:`~dparallel.errors.DiskFullError` with no temporary file left.

    Saved device-neutral: tensors on a GPU are written from CPU copies, so every file
    loads on a machine without one.
    """
    data = _on_cpu(obj)
    # a new file renamed into place, on disk before it is (dparallel._files)
    write_serialized(path, lambda f: torch.save(data, f, pickle_protocol=_PICKLE_PROTOCOL))


class _Refused(pickle.UnpicklingError):
    """An object a ``.pt2`` archive asked to unpickle (refused, never built)."""


def _refuse_pickle(*args: Any, **kwargs: Any) -> Any:
    raise _Refused("GLOBAL: a pickled Python object (refused: dparallel never unpickles)")


@contextlib.contextmanager
def _weights_only() -> Iterator[None]:
    """While loading a ``.pt2``: every ``torch.load`` weights-only, pickles refused.

    torch 2.13's ``torch.export.load`` reads weights and constants with
    ``torch.load(weights_only=False)``, other constants with ``pickle.loads`` and, when the
    weights-only read of the sample inputs fails, falls back to ``weights_only=False``: an
    archive's pickle runs code. Here each of those reads is weights-only or refused, so a
    ``.pt2`` that is more than tensors and plain data fails to load instead.
    """
    from torch.export.pt2_archive import _package

    real_load = torch.load

    def weights_only_load(*args: Any, **kwargs: Any) -> Any:
        kwargs["weights_only"] = True
        return real_load(*args, **kwargs)

    real_pickle = _package.pickle
    real_obj = torch._C._pickle_load_obj
    with _LOAD_LOCK:
        torch.load = weights_only_load
        _package.pickle = types.SimpleNamespace(  # type: ignore[assignment]
            loads=_refuse_pickle, dumps=pickle.dumps, UnpicklingError=pickle.UnpicklingError
        )
        torch._C._pickle_load_obj = _refuse_pickle
        try:
            yield
        finally:
            torch.load = real_load
            _package.pickle = real_pickle
            torch._C._pickle_load_obj = real_obj


_LOAD_LOCK = threading.Lock()


def load_exported_program(path: str | os.PathLike[str]) -> Any:
    """``torch.export.load(path)`` without unpickling, errors naming the file (``.pt2``).

    Every read inside the archive is weights-only (see :func:`_weights_only`): a ``.pt2``
    holding a pickled object (in its weights, constants or sample inputs) is refused, its
    code never run.
    """
    path = Path(path)
    try:
        with warnings.catch_warnings(), _weights_only():
            warnings.simplefilter("ignore")
            return torch.export.load(path)
    except Exception as exc:  # noqa: BLE001 - any failure to deserialize is the file's
        refused = _refused_global(exc) if isinstance(exc, pickle.UnpicklingError) else None
        if refused is not None:
            raise _refusal(path, "exported program", refused) from None
        raise TrainingError(
            f"{path}: cannot load this exported program (truncated or corrupt?): {first_line(exc)}"
        ) from None
