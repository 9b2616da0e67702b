"""One exception hierarchy for every error dparallel raises on purpose.

Each error says what was expected, what came and, where possible, how to fix it.
Subclasses also inherit the matching built-in (``ValueError``, ``FileNotFoundError``…)
so that callers who catch the built-ins keep working.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from os import PathLike


class DParallelError(Exception):
    """Base class of every error raised by dparallel."""


class ArgumentTypeError(DParallelError, TypeError):
    """An argument of a Python call is not of a type it takes (a list of ``ase.Atoms``
    where a file's path is needed, a mapping where a spec object is); says what to give."""


class InputError(DParallelError, ValueError):
    """A structure source is unreadable or holds invalid data."""


class InputFormatError(InputError):
    """A structure file is malformed; names the file and the line or frame.

    ``kept_in``: set by a writer that met it while writing a store's partitions (the store,
    which keeps those done before); ``None`` where it came before any was written.
    """

    kept_in: str | None = None

    def __init__(
        self,
        message: str,
        *,
        path: str | PathLike[str] | None = None,
        line: int | None = None,
        frame: int | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line, self.frame, self.reason = line, frame, message
        where = [] if self.path is None else [self.path]
        where += [
            f"{name} {at}" for name, at in (("line", line), ("structure", frame)) if at is not None
        ]
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class InvalidStructureError(InputFormatError):
    """A structure parsed but is physically invalid (NaN, singular cell, unknown element…)."""


class SourceNotFoundError(InputError, FileNotFoundError):
    """The input file does not exist."""

    def __new__(cls, *args: object, **kwargs: object) -> SourceNotFoundError:
        # named, so that ``cls.__new__(cls, *args)`` (how tblib, and so Dask, rebuilds a
        # task's exception) finds OSError's and not ValueError's, which refuses the class
        return FileNotFoundError.__new__(cls, *args)


class SourceChangedError(InputError):
    """The input file changed while a run read it (its size, time or layout differ from
    what was indexed): what was read may mix two versions."""


class StoreError(DParallelError):
    """A zarr store cannot be created, opened or written."""


class StoreMismatchError(StoreError, ValueError):
    """An existing store was made from another source or config (use --overwrite).

    ``overwrite_option``: where the message names the option that replaces the store, the
    option as named there; :meth:`naming` names it as the caller spells it instead
    (``dparallel run``: its workflow key ``store.overwrite``). Such an error is made by
    :meth:`naming_option`, from the text around the option: renaming it rebuilds the
    message, so nothing else in it (a path, a difference) is ever rewritten.
    """

    def __init__(
        self,
        message: str,
        *,
        overwrite_option: str | None = None,
        around: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.overwrite_option = overwrite_option
        self.around = around

    @classmethod
    def naming_option(cls, before: str, option: str, after: str) -> StoreMismatchError:
        """The error ``before + option + after``, whose ``option`` :meth:`naming` renames."""
        return cls(before + option + after, overwrite_option=option, around=(before, after))

    def naming(self, option: str) -> StoreMismatchError:
        """This error with its option to replace the store named ``option`` (itself where
        it names none)."""
        if self.around is None or self.overwrite_option == option:
            return self
        return StoreMismatchError.naming_option(self.around[0], option, self.around[1])

    def __reduce__(self) -> tuple:  # keeps the option when it crosses processes
        state = {"overwrite_option": self.overwrite_option, "around": self.around}
        return (StoreMismatchError, (str(self),), state)


class StoreIncompleteError(StoreError):
    """A store is read as complete but some partitions are not done."""


class StoreBusyError(StoreError):
    """Another process (this host or another) holds the store's lease: it is writing it."""


class StoreRemovedError(StoreError):
    """A reader's store at a URL was replaced and its old generation deleted under it."""


class UnsafePathError(StoreError, ValueError):
    """A path that must never be replaced (root, home, working directory, the input…)."""


class ConfigError(DParallelError, ValueError):
    """A configuration (workflow, descriptor set, training config) is invalid."""


class DescriptorError(DParallelError, ValueError):
    """A descriptor definition or its input is invalid."""


class UnknownElementError(DescriptorError):
    """An atom whose element a descriptor or model does not know; ``structure`` is its
    structure's index in the batch given, ``detail`` the message after it (a caller that
    knows where the batch starts in a file names the structure there, ``where`` the
    file)."""

    def __init__(self, structure: int, detail: str, where: str = "") -> None:
        super().__init__(f"{where}structure {structure}, {detail}")
        self.structure = structure
        self.detail = detail


class BackendUnavailableError(DParallelError, RuntimeError):
    """A requested kernel backend cannot be used on this machine."""


class KernelInputError(DParallelError, ValueError):
    """Tensors passed to a kernel have the wrong shape, dtype, device or index range."""


class ClusterError(DParallelError, RuntimeError):
    """A Dask cluster cannot be reached or started."""


class WorkerKilledError(ClusterError):
    """The worker processes running a task kept dying under it (killed by their nanny for
    memory, by a signal or the system's out-of-memory killer, or crashed); ``memory``:
    whether a nanny reported killing one of them for memory."""

    def __init__(self, message: str, *, memory: bool = False) -> None:
        super().__init__(message)
        self.memory = memory


class SchedulerRestartedError(ClusterError):
    """The scheduler was restarted (``Client.restart``) more often than a run outlives: each
    restart cancels every task it holds."""


class PartitionFailedError(DParallelError, RuntimeError):
    """A partition kept failing (or killing its worker); names it and its structures."""


class DiskFullError(DParallelError, OSError):
    """A filesystem is full (or over quota); names the file and the space it needed.

    What was done is kept, and no temporary file is left (``dparallel._files``).
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | PathLike[str] | None = None,
        needed: int | None = None,
        code: int = 28,  # errno.ENOSPC (errno.EDQUOT for a quota)
    ) -> None:
        super().__init__(message)
        self.errno = code  # as the OSError it stands for: callers test errno
        self.path = None if path is None else str(path)
        self.needed = needed

    def __reduce__(self) -> tuple:  # a task's error crosses processes whole
        state = {"path": self.path, "needed": self.needed, "errno": self.errno}
        return (DiskFullError, (str(self),), state)


class NonFiniteError(DParallelError, ValueError):
    """A number that must be finite is NaN or infinite; names where it is (a weight, an
    atom's force, a hyperparameter, a key of JSON output)."""


class RunInterruptedError(DParallelError):
    """A run was interrupted (Ctrl-C, SIGTERM); says what is kept and how to resume."""


class TrainingError(DParallelError, RuntimeError):
    """Training cannot start or continue (empty split, missing arrays, bad checkpoint…)."""


class CheckpointMismatchError(TrainingError):
    """A checkpoint that cannot be resumed: none, not dparallel's, or of another training
    configuration or store."""


class DeviceError(TrainingError):
    """A compute device was asked for but is absent, or ran out of memory; says what to do."""


class HostMemoryError(TrainingError):
    """Streamed training clearly cannot fit the host memory available; says what to lower."""


#: Every error class above: the whole hierarchy is public.
__all__ = sorted(
    name
    for name, value in list(globals().items())
    if isinstance(value, type) and issubclass(value, DParallelError)
)
