"""The zarr store (the only package importing zarr); layout in docs/store-format.md.

A store is laid out by its partition :class:`Plan`, created (or resumed, or replaced)
by :func:`create_store` under the store's lease, and judged by one predicate,
:func:`store_status`. It lives in any zarr ``Store`` (a folder, a ``MemoryStore``, an
fsspec URL). A folder gets a lock file, replacement by rename and the direct-file
writes; a URL (object storage) a lease object and generations published by conditional
writes (``_lease``, ``_generations``, ``_create_remote``, ``_objects``);
``_where`` sends each call to the right one.

Modules: ``_layout`` (names, formats, chunking, compressors), ``_backend`` (which zarr
store; ``_s3``: the one on S3, over obstore), ``_opened`` / ``_writes`` / ``_reads`` /
``_store`` (the :class:`Store`), ``_direct`` (files written as zarr would), ``_create``,
``_identity`` (which store this is), ``_lease``, ``_safety`` (what may be replaced),
``_own_files`` (which files in a store are dparallel's), ``_chunks`` (many small chunks
read at once: ``info``'s counts) and ``_verify`` (every chunk of the done partitions
read: ``info --verify``).
"""

from __future__ import annotations

from dparallel.store._create import StoreStatus
from dparallel.store._identity import current_identity, store_identity
from dparallel.store._lease import StoreLease, held_lease, lease_holder, lease_path
from dparallel.store._objects import require_conditional_writes as check_writable
from dparallel.store._safety import check_replaceable, is_dparallel_store
from dparallel.store._store import FORMAT_VERSION, SOURCE_IDENTITY_KEYS, Store
from dparallel.store._verify import Problem, Verification
from dparallel.store._where import (
    create_store,
    open_store,
    publish_store,
    refuse_foreign_target,
    store_status,
    target_path,
)
from dparallel.store.plan import Plan, Slots, derived_partition_atoms, plan_partitions

__all__ = [
    "FORMAT_VERSION",
    "SOURCE_IDENTITY_KEYS",
    "Plan",
    "Problem",
    "Slots",
    "Store",
    "StoreLease",
    "StoreStatus",
    "Verification",
    "check_replaceable",
    "check_writable",
    "create_store",
    "current_identity",
    "derived_partition_atoms",
    "held_lease",
    "is_dparallel_store",
    "lease_holder",
    "lease_path",
    "open_store",
    "plan_partitions",
    "publish_store",
    "refuse_foreign_target",
    "store_identity",
    "store_status",
    "target_path",
]
