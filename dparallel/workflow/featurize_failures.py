"""One error for the partitions of a featurize run that failed, saying what a rerun does:
the scheduler lost or restarted too often, a full disk or a store that cannot be written,
an input that changed under the run, invalid input (a rerun fails the same way), workers
that died running them (out of memory: what to change), or anything else (a rerun
computes only the rest)."""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from dparallel.errors import (
    ClusterError,
    DiskFullError,
    InputError,
    PartitionFailedError,
    SchedulerRestartedError,
    SourceChangedError,
    StoreError,
    WorkerKilledError,
)
from dparallel.store import target_path

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dparallel.store import Store

__all__ = ["raise_failures"]

#: How the messages name the options a worker death asks to change, unless the caller's
#: ``names`` spell them otherwise (``dparallel run``: its workflow keys).
OPTION_NAMES = {
    "memory_limit": "--memory-limit",
    "partition_atoms": "--partition-atoms",
    "overwrite": "--overwrite",
}


def _scheduler_lost(exc: BaseException | None) -> bool:
    """A task cancelled because the client lost its scheduler (not the partition's fault)."""
    text = f"{type(exc).__name__}: {exc}"
    return "scheduler-connection-lost" in text or "lost the connection to the scheduler" in text


def _disk_full(exc: BaseException | None) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _not_writable(exc: BaseException | None) -> str | None:
    """Why the store cannot be written (a read-only filesystem, no permission), else None."""
    if isinstance(exc, OSError) and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return exc.strerror or os.strerror(exc.errno)
    return None


def _input_changed(exc: BaseException | None) -> bool:
    """The input file changed under the run (the reader's check), not an invalid
    structure in it."""
    return isinstance(exc, SourceChangedError)


def _deaths_how(
    killed: list[WorkerKilledError], names: Mapping[str, str], kept: int, *, single: bool
) -> str:
    """What to do about partitions whose workers died under them (``kept`` partitions
    done): more memory resumes the store; another partition size replans it, unless each
    of them holds one structure (``single``), which no partition size splits."""
    names = {**OPTION_NAMES, **names}
    again = f"computes its {kept} done partitions again" if kept else "loses nothing"
    more_memory = (
        f"give each worker more memory with {names['memory_limit']} (workers you start: "
        f"`dask worker --memory-limit`) and rerun the same command to compute only the rest"
    )
    fix = (
        f"{more_memory} (each of these partitions is one structure, which no partition size splits)"
        if single
        else f"{more_memory}, or make partitions smaller with {names['partition_atoms']} and "
        f"{names['overwrite']} (another size replans the store: it {again})"
    )
    if any(exc.memory for exc in killed):
        return f"the workers ran out of memory (below): {fix}"
    return (
        "their workers died (below; a signal, the system's out-of-memory killer or a crash, "
        f"the workers' logs say which): if it was memory, {fix}; else rerun the same command "
        "to compute only the rest"
    )


def raise_failures(
    store: Store, failures: Mapping[int, BaseException], names: Mapping[str, str] | None = None
) -> None:
    """Raise one error for the partitions that failed (nothing if none did); ``names``:
    how the messages name options (:data:`OPTION_NAMES`' keys) where the caller spells
    them otherwise."""
    if not failures:
        return
    done = set(store.done_partitions())
    # a partition whose marker is written counts as done, whatever its future said
    failures = {p: exc for p, exc in failures.items() if p not in done}
    if not failures:
        return
    kept = len(done)
    total = store.n_partitions
    if any(_scheduler_lost(exc) for exc in failures.values()):
        raise ClusterError(
            f"lost the connection to the Dask scheduler: {kept} of {total} partitions of "
            f"{target_path(store)} are done and kept, {len(failures)} were not computed; "
            "once the scheduler is back (or with --local N), rerun the same command to "
            "compute only the rest"
        )
    restarted = [exc for exc in failures.values() if isinstance(exc, SchedulerRestartedError)]
    if restarted:
        raise SchedulerRestartedError(
            f"{restarted[0]}: {kept} of {total} partitions of {target_path(store)} are done "
            f"and kept, {len(failures)} were not computed; rerun the same command when the "
            "cluster is left alone to compute only the rest"
        )
    full = sorted(p for p, exc in failures.items() if _disk_full(exc))
    if full:
        raise DiskFullError(
            f"no space left on the device of {target_path(store)}: {len(full)} of {total} "
            "partitions "
            f"could not be written ({kept} done partitions are kept); free space and rerun "
            "the same command to compute only the rest"
        )
    refused = sorted({why for exc in failures.values() if (why := _not_writable(exc))})
    if refused:
        raise StoreError(
            f"cannot write {target_path(store)}: {'; '.join(refused)}: {len(failures)} of "
            f"{total} partitions could not be written ({kept} done partitions are kept); make "
            "the store writable and rerun the same command to compute only the rest"
        )
    if any(_input_changed(exc) for exc in failures.values()):
        # whatever else failed may be the change too (a truncated structure): that is the fix
        how = (
            "the input file changed while this run read it (below), so no structure in it "
            "need be invalid: leave the input alone while a run reads it, then rerun (a "
            "store begun from the old version is refused, not mixed: rerun with --overwrite "
            "for the new version)"
        )
    elif all(isinstance(exc, InputError) for exc in failures.values()):
        # the same input fails the same way: the kept partitions serve a rerun only if
        # neither the file nor --on-error changes, and either is the fix
        how = (
            "the input holds invalid structures (below), so a rerun fails the same way: fix "
            "them (the changed file is another source: rerun with --overwrite), or leave "
            "them out with --on-error skip --overwrite"
        )
    elif killed := {p: exc for p, exc in failures.items() if isinstance(exc, WorkerKilledError)}:
        single = all(len(range(*store.partition_range(p))) == 1 for p in killed)
        how = _deaths_how(list(killed.values()), names or {}, kept, single=single)
    else:
        how = "a rerun computes only the rest"
    lines = [
        f"{len(failures)} of {total} partitions failed; {kept} done partitions are kept; {how}."
    ]
    for said, parts in _alike(failures).items():
        if len(parts) == 1:
            start, stop = store.partition_range(parts[0])
            lines.append(f"partition {parts[0]} (structures {start}..{stop - 1}) failed: {said}")
        else:  # one cause of many partitions (no worker left, …) is said once
            lines.append(f"partitions {_spans(parts)} ({len(parts)}) failed: {said}")
    raise PartitionFailedError("\n".join(lines))


def _alike(failures: Mapping[int, BaseException]) -> dict[str, list[int]]:
    """The failures' texts (``Type: message``), each with its partitions in order."""
    said: dict[str, list[int]] = {}
    for p, exc in sorted(failures.items()):
        said.setdefault(f"{type(exc).__name__}: {exc}", []).append(p)
    return said


def _spans(parts: list[int]) -> str:
    """Sorted partition numbers as spans: ``2–5, 7, 9–10``."""
    spans: list[list[int]] = []
    for p in parts:
        if spans and p == spans[-1][1] + 1:
            spans[-1][1] = p
        else:
            spans.append([p, p])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)
