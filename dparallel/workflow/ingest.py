"""Ingest a structure file into a store, partition by partition (bounded memory, resumable).

:func:`ingest_partition` is the unit of work: it reads one partition's structures from
the source by path and writes them into the partition's own chunks, so a Dask version
can submit it per partition unchanged. :func:`ingest` runs every pending one in-process.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from dparallel._files import raise_if_disk_full
from dparallel.errors import ArgumentTypeError, DiskFullError, InputFormatError
from dparallel.io import StructureSource, open_source
from dparallel.store import (
    Store,
    StoreLease,
    create_store,
    plan_partitions,
    publish_store,
    refuse_foreign_target,
    target_path,
)
from dparallel.store.plan import MAX_PARTITION_ATOMS, given_partition_atoms

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterable

    from dparallel.io.location import Where

__all__ = [
    "IngestOptions",
    "IngestResult",
    "ingest",
    "ingest_partition",
    "open_options",
    "prepare_ingest",
    "repair",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestOptions:
    """How :func:`ingest` reads the source (:func:`dparallel.io.open_source`; with
    ``on_error="skip"`` structures that cannot be read are skipped and recorded;
    ``energy_key``, ``forces_key``: where the labels are, default ``energy`` else
    ``REF_energy``, ``forces`` else ``REF_forces``) and writes the store."""

    format: str | None = None
    units: str = "ase"
    on_error: Literal["raise", "skip"] = "raise"
    energy_key: str | None = None
    forces_key: str | None = None
    partition_atoms: int | None = MAX_PARTITION_ATOMS  # None: MAX_PARTITION_ATOMS too
    overwrite: bool = False  # replace a store of another source or config, not refuse
    repair: bool = False  # verify a resumed store first, write its damaged partitions again
    protect: Iterable[str | os.PathLike[str]] = ()  # files the store path may not be or hold
    progress: Callable[[int, int], None] | None = field(default=None, compare=False)


_DEFAULTS = IngestOptions()


@dataclass(frozen=True)
class IngestResult:
    """Outcome of :func:`ingest`: the store, partitions written now / already done, skips."""

    store: Store
    partitions_written: int
    partitions_already_done: int
    n_skipped: int
    seconds: float


def ingest_config(source: StructureSource, partition_atoms: int) -> dict[str, Any]:
    """The config recorded in the store (a store is never mixed across configs). The label
    keys only where given: a store read with the default keys is recorded as before them."""
    return {
        "ingest": {
            "format": source.format,
            "units": source.units,
            "on_error": source.on_error,
            **source.labels.given(),
            "partition_atoms": int(partition_atoms),
        }
    }


def open_options(options: IngestOptions | Any) -> dict[str, Any]:
    """:func:`~dparallel.io.open_source`'s keyword arguments from ``options`` (an
    :class:`IngestOptions` or a ``FeaturizeOptions``): how the source is read."""
    names = ("units", "on_error", "energy_key", "forces_key")
    return {name: getattr(options, name) for name in names}


def prepare_ingest(
    source: StructureSource, store_path: Where, options: IngestOptions = _DEFAULTS
) -> Store:
    """Plan partitions for ``source`` and create (or reopen, for resume) the store, as
    ``options`` say (``partition_atoms=None``: :data:`~dparallel.store.plan.MAX_PARTITION_ATOMS`;
    below 1: a :class:`ConfigError`)."""
    given = given_partition_atoms(options.partition_atoms)
    partition_atoms = MAX_PARTITION_ATOMS if given is None else given
    plan = plan_partitions(source.atom_counts, partition_atoms)
    store = create_store(
        store_path,
        source_fingerprint=source.fingerprint(),
        plan=plan,
        config=ingest_config(source, partition_atoms),
        overwrite=options.overwrite,
        protect=options.protect,
        aside=True,
    )
    if options.repair:
        repair(store)
    return store


def repair(store: Store) -> None:
    """``--repair``: verify ``store`` (``dparallel info --verify``) and mark its damaged done
    partitions not done, so this run writes them again (a warning names them)."""
    damaged = store.redo_damaged()
    if damaged:
        shown = ", ".join(map(str, damaged[:10])) + (", …" if len(damaged) > 10 else "")
        warnings.warn(
            f"{target_path(store)}: computing again the done partitions with a chunk "
            f"missing, unreadable or not finite ({len(damaged)}): {shown}",
            stacklevel=2,
        )


def ingest_partition(source: StructureSource, store: Store, p: int) -> dict[str, Any]:
    """Read partition ``p``'s structures from ``source`` and write them (idempotent); the
    report (counts, seconds) is also stored with the done marker."""
    from dparallel.cluster.secede import outside_the_pool

    t0 = time.perf_counter()
    start, stop = store.partition_range(p)
    result = source.read_checked(start, stop)
    with outside_the_pool(enabled=not store.is_local) as waited:  # as featurize's writes
        store.write_structures(p, result.batch, source_index=result.indices)
        if result.skipped:
            store.record_skipped(result.skipped)
        report = {
            "partition": int(p),
            "n_structures": result.batch.n_structures,
            "n_atoms": result.batch.n_atoms,
            "n_skipped": len(result.skipped),
            "seconds": round(time.perf_counter() - t0 - waited, 6),
        }
        store.mark_done(p, report)
    return report


def ingest(
    input_path: Where, store_path: Where, options: IngestOptions = _DEFAULTS
) -> IngestResult:
    """Ingest ``input_path`` into the store at ``store_path`` in this process, as ``options``
    say; resumable (only partitions not yet done are written), in the memory of one
    partition plus the index."""
    if not isinstance(options, IngestOptions):
        raise ArgumentTypeError(
            f"ingest: options is a {type(options).__name__}, not an IngestOptions "
            "(IngestOptions(**...))"
        )
    t0 = time.perf_counter()
    source = open_source(input_path, options.format, **open_options(options))
    refuse_foreign_target(store_path, options.overwrite, (input_path, *options.protect))
    with StoreLease(store_path, command="dparallel ingest") as lease:
        store = prepare_ingest(source, store_path, options)
        pending = store.pending_partitions()
        already = store.n_partitions - len(pending)
        if already:
            log.info("resuming: %d of %d partitions already done", already, store.n_partitions)
        n_skipped = 0
        for k, p in enumerate(pending):
            lease.check()
            try:
                n_skipped += ingest_partition(source, store, int(p))["n_skipped"]
            except InputFormatError as exc:  # the partitions done before it are kept
                exc.kept_in = str(store_path)
                raise
            except OSError as exc:  # zarr's own writes (a group, its attributes) name no file
                if not isinstance(exc, DiskFullError):
                    raise_if_disk_full(exc, str(store_path), None)
                raise
            if options.progress is not None:
                options.progress(already + k + 1, store.n_partitions)
        store = publish_store(store)
    return IngestResult(
        store=store,
        partitions_written=len(pending),
        partitions_already_done=already,
        n_skipped=n_skipped,
        seconds=time.perf_counter() - t0,
    )
