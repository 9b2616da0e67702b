"""The front of the store: :class:`Store`, its writes and reads in one object.

See docs/store-format.md for the layout (:mod:`~dparallel.store._layout`), and
:mod:`~dparallel.store._writes` / :mod:`~dparallel.store._reads` for what it does.
"""

from __future__ import annotations

from dparallel.errors import StoreError
from dparallel.store._layout import FORMAT_VERSION, SOURCE_IDENTITY_KEYS
from dparallel.store._reads import StoreReads
from dparallel.store._writes import StoreWrites

__all__ = ["FORMAT_VERSION", "SOURCE_IDENTITY_KEYS", "Store"]


class Store(StoreWrites, StoreReads):
    """A dparallel zarr store opened for reading (``mode="r"``) or writing (``"r+"``).

    ``store``: a path (a local store, as :func:`~dparallel.store.create_store` makes), a
    URL or a zarr ``Store`` such as :class:`zarr.storage.MemoryStore`; every read and
    write goes through that zarr store (a local one also through its files directly, see
    :mod:`~dparallel.store._direct`). Picklable (path or zarr store, and mode), so a task
    can receive it and write its own partition.
    """

    def redo_damaged(self) -> list[int]:
        """Verify the store (:meth:`verify`, ``dparallel info --verify``) and mark not done
        every done partition with a chunk missing, unreadable or not finite, so a resumed
        ``featurize`` or ``ingest`` computes it again (``--repair``); returns them. A damage
        no partition owns (a group's ``zarr.json`` of the layout) is a
        :class:`~dparallel.errors.StoreError`: only making the store again mends it."""
        checked = self.verify()
        if whole := [q for q in checked.problems if q.partition is None]:
            raise StoreError(
                f"{self.location}: {whole[0].line()}, which no partition owns, so computing "
                f"partitions again cannot mend it: {self.remake}"
            )
        damaged = sorted({int(q.partition) for q in checked.problems if q.partition is not None})
        for p in damaged:
            self.clear_done(p)
        return damaged
