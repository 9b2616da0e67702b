"""Reads of a complete store at a URL, kept in memory: training's later epochs read it once.

Whole objects and listings, up to ``DPARALLEL_REMOTE_CACHE_MB`` (default 2048; 0: off);
what does not fit is not cached rather than evicting (docs/store-format.md, "How training
reads it").
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

from zarr.storage import WrapperStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from zarr.abc.store import ByteRequest
    from zarr.core.buffer import Buffer, BufferPrototype

__all__ = ["ENV_CACHE_MB", "CachedReads", "cache_budget"]

#: Environment variable: the cache's budget in MiB (per opened store).
ENV_CACHE_MB = "DPARALLEL_REMOTE_CACHE_MB"


def cache_budget() -> int:
    """The budget in bytes (``DPARALLEL_REMOTE_CACHE_MB``, default 2048 MiB)."""
    from dparallel.config import env_number

    return int(env_number(ENV_CACHE_MB, 2048, "MiB") * (1 << 20))


class CachedReads(WrapperStore[Any]):
    """A read-only zarr store whose whole-object reads are kept (see the module docstring)."""

    def __init__(self, store: Any, budget: int) -> None:
        super().__init__(store)
        self._budget = int(budget)
        self._kept: dict[str, bytes] = {}
        self._size = 0
        self._lock = threading.Lock()
        self._listed: dict[str, list[str]] = {}
        self._missing: set[str] = set()
        self._fetched: set[str] = set()

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The store's listing of ``prefix``, kept (a complete generation's never changes)."""
        with self._lock:
            listed = self._listed.get(prefix)
        if listed is None:
            listed = [key async for key in self._store.list_dir(prefix)]
            with self._lock:
                self._listed[prefix] = listed
        for key in listed:
            yield key

    async def prefetch(self, prefix: str) -> None:
        """Read every object below ``prefix`` at once (one listing, concurrent GETs) into
        the cache, so that zarr's reads one after another find them in memory."""
        from zarr.core.buffer import default_buffer_prototype

        with self._lock:
            if prefix in self._fetched:
                return  # all of it is in memory already, or did not fit
            self._fetched.add(prefix)
        keys = [k async for k in self._store.list_prefix(prefix)]
        with self._lock:
            keys = [k for k in keys if k not in self._kept and k not in self._missing]
        prototype = default_buffer_prototype()
        found = await asyncio.gather(*(self._store.get(k, prototype) for k in keys))
        with self._lock:
            for key, buffer in zip(keys, found, strict=True):
                if buffer is None:
                    continue
                data = buffer.to_bytes()
                if self._size + len(data) <= self._budget:
                    self._kept[key] = data
                    self._size += len(data)

    def unwrapped(self) -> Any:
        """The zarr store it reads through."""
        return self._store

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        cacheable = byte_range is None
        if cacheable:
            with self._lock:
                data = self._kept.get(key)
                if data is None and key in self._missing:
                    return None  # a chunk left out (all fill values): it stays out
            if data is not None:
                return prototype.buffer.from_bytes(data)
        buffer = await self._store.get(key, prototype, byte_range)
        if cacheable:
            data = b"" if buffer is None else buffer.to_bytes()
            with self._lock:
                if buffer is None:
                    self._missing.add(key)
                elif key not in self._kept and self._size + len(data) <= self._budget:
                    self._kept[key] = data
                    self._size += len(data)
        return buffer
