"""The zarr store behind a dparallel store on S3 or Azure: zarr's ``ObjectStore`` over
obstore, configured as every location there is (:mod:`dparallel.io._s3`,
:mod:`dparallel.io._azure`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from zarr.storage import ObjectStore

from dparallel.errors import StoreError, StoreRemovedError
from dparallel.io._azure import AZURE_PROTOCOLS, azure_store
from dparallel.io._s3 import S3OptionError, as_os_errors, s3_store
from dparallel.io._s3_objects import DELETE_TRIES, resend_delete

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from zarr.abc.store import ByteRequest
    from zarr.core.buffer import Buffer, BufferPrototype

    from dparallel.io.location import Location

__all__ = ["S3ObjectStore", "s3_zarr_store"]

#: The group document at a store's root: deleted first with its generation, so a key
#: missing where it is missing too means the generation is gone (not a fill-value chunk).
_ROOT = "zarr.json"


class S3ObjectStore(ObjectStore):
    """zarr's ``ObjectStore`` that puts each object in one request, and whose failures are
    ``OSError`` naming the store (as s3fs's were; obstore's own are not).

    obstore would split an object over 5 MB into a multipart upload: four requests or more
    for a derivative chunk, which a store's writes, already many at a time, do not need.
    """

    def __init__(self, store: Any, *, read_only: bool = False, url: str = "") -> None:
        super().__init__(store, read_only=read_only)
        self.url = url

    def with_read_only(self, read_only: bool = False) -> S3ObjectStore:
        return type(self)(self.store, read_only=read_only, url=self.url)

    def __str__(self) -> str:
        return self.url or super().__str__()

    async def set(self, key: str, value: Buffer) -> None:
        import obstore

        self._check_writable()
        with as_os_errors(self):
            await obstore.put_async(self.store, key, value.as_buffer_like(), use_multipart=False)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        with as_os_errors(self):
            found = await super().get(key, prototype, byte_range)
            if found is None and key != _ROOT and not await super().exists(_ROOT):
                raise StoreRemovedError(
                    f"{self}: removed while being read (the store was replaced, and a later "
                    f"writing run deleted this generation; {key} is gone): open the store again"
                )
        return found

    async def exists(self, key: str) -> bool:
        with as_os_errors(self):
            return await super().exists(key)

    async def delete(self, key: str) -> None:
        with as_os_errors(self):
            for attempt in range(DELETE_TRIES):
                try:
                    await super().delete(key)
                    return
                except Exception as exc:
                    pause = resend_delete(exc, attempt)
                    if pause is None:
                        raise
                await asyncio.sleep(pause)

    async def delete_dir(self, prefix: str) -> None:
        with as_os_errors(self):
            await super().delete_dir(prefix)

    async def _list(self, prefix: str | None = None) -> AsyncGenerator[Any, None]:
        with as_os_errors(self):
            async for item in super()._list(prefix):
                yield item

    async def list_dir(self, prefix: str) -> AsyncGenerator[str, None]:
        with as_os_errors(self):
            async for item in super().list_dir(prefix):
                yield item


def s3_zarr_store(root: Location, read_only: bool) -> S3ObjectStore:
    """The zarr store at ``root`` (``s3://bucket/prefix`` or ``az://container/prefix``),
    read-only for ``read_only``."""
    make = azure_store if root.protocol in AZURE_PROTOCOLS else s3_store
    try:
        return S3ObjectStore(make(root.url, root.options), read_only=read_only, url=root.url)
    except S3OptionError as exc:
        raise StoreError(f"cannot open {root} as a zarr store: {exc}") from exc
