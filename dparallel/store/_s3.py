"""The zarr store behind a dparallel store on S3: zarr's ``ObjectStore`` over obstore,
configured as every S3 location is (:mod:`dparallel.io._s3`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zarr.storage import ObjectStore

from dparallel.errors import StoreError
from dparallel.io._s3 import S3OptionError, s3_store

if TYPE_CHECKING:
    from zarr.core.buffer import Buffer

    from dparallel.io.location import Location

__all__ = ["S3ObjectStore", "s3_zarr_store"]


class S3ObjectStore(ObjectStore):
    """zarr's ``ObjectStore`` that puts each object in one request.

    obstore would split an object over 5 MB into a multipart upload: four requests or more
    for a derivative chunk, which a store's writes, already many at a time, do not need.
    """

    async def set(self, key: str, value: Buffer) -> None:
        import obstore

        self._check_writable()
        await obstore.put_async(self.store, key, value.as_buffer_like(), use_multipart=False)


def s3_zarr_store(root: Location, read_only: bool) -> S3ObjectStore:
    """The zarr store at ``root`` (``s3://bucket/prefix``), read-only for ``read_only``."""
    try:
        return S3ObjectStore(s3_store(root.url, root.options), read_only=read_only)
    except S3OptionError as exc:
        raise StoreError(f"cannot open {root} as a zarr store: {exc}") from exc
