"""How a task's writes reach the store, once :class:`~dparallel.store._writes.StoreWrites`
has laid them out: a local store's chunk files and documents written directly
(:mod:`~dparallel.store._direct`), a store at a URL's keys put as one batch
(:mod:`~dparallel.store._batch`), and what neither can write through zarr's own API. Each
route returns what it left for the next.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel._files import refuse_links
from dparallel.store._dims import generic_dims
from dparallel.store._direct import (
    read_array_metadata,
    writable,
    write_array,
    write_chunk,
    write_fill_chunk,
    write_group,
)
from dparallel.store._layout import CHUNK_KEYS, ZARR3, _compressors

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = [
    "Job",
    "files_below",
    "make_groups",
    "put_groups",
    "put_rows",
    "write_into_folder",
    "write_rows_direct",
    "write_through_zarr",
]

#: (group, array name, values, dimension names) of one array to write
Job = tuple[str | None, str, np.ndarray, tuple]


async def make_groups(
    store: Any, groups: Sequence[str], attributes: Mapping[str, Mapping[str, Any]], skip: int
) -> None:
    """Each of ``groups`` (paths in ``store``, parents first) made through zarr unless a
    group is there; a new one gets ``attributes[path[skip:]]`` (zarr's equivalent of
    :func:`~dparallel.store._direct.write_group`)."""
    from zarr.api.asynchronous import open_group

    for path in groups:
        await open_group(
            store=store,
            path=path,
            mode="a",
            attributes=dict(attributes.get(path[skip:], {})),
            **ZARR3,
        )


async def put_groups(
    store: Any,
    part: str,
    levels: Sequence[str],
    jobs: Sequence[Job],
    attributes: Mapping[str, Mapping[str, Any]],
    replace: str | None,
) -> tuple[list[Job], bool]:
    """:meth:`~dparallel.store._writes.StoreWrites._write_groups` into a store at a URL:
    what ``part/<replace>`` held removed, then ``part`` (unless there), its groups and
    arrays as one batch (:mod:`~dparallel.store._batch`), found with one listing of
    ``part``. Returns the jobs left for zarr's API, and whether ``part``'s own document was
    made here."""
    from dparallel.store import _batch

    found = await _batch.keys_below(store, f"{part}/")
    if replace is not None:
        stale = f"{part}/{replace}/"
        await asyncio.gather(*(store.delete(k) for k in found if k.startswith(stale)))
    put = _batch.started_put(store)
    chunks: list[asyncio.Future[None]] = []
    documents, rest = [], []
    try:
        for group, name, values, dims in jobs:
            path = "/".join(filter(None, (part, group, name)))
            made = _batch.array_items(
                path, values, _compressors(values.dtype), dims or generic_dims(name, values.ndim),
                CHUNK_KEYS,
            )  # fmt: skip
            if made is None:
                rest.append((group, name, values, dims))
            else:  # each chunk on its way while the next array is encoded
                chunks += map(put, made[0])
                documents.append(made[1])
                await asyncio.sleep(0)
    except BaseException:  # what is on its way is not left running unwatched
        for chunk in chunks:
            chunk.cancel()
        await asyncio.gather(*chunks, return_exceptions=True)
        raise
    documents += [_batch.group_item(f"{part}/{level}", attributes.get(level)) for level in levels]
    new_part = f"{part}/zarr.json" not in found
    if new_part:
        documents.append(_batch.group_item(part))
    await asyncio.gather(*chunks)  # the chunks before the documents that make them readable
    # a group's document may land before its arrays': a partition is read only once done
    await _batch.put_all(store, (documents,))
    return rest, new_part


async def put_rows(
    store: Any, writes: Sequence[tuple[str, slice, np.ndarray]]
) -> list[tuple[str, slice, np.ndarray]]:
    """:meth:`~dparallel.store._writes.StoreWrites._write_rows` into a store at a URL:
    whole chunks of numbers as one batch; returns the writes left for zarr's API."""
    from dparallel.store import _batch

    metas = await asyncio.gather(*(_batch.slot_metadata(store, name) for name, _, _ in writes))
    items, empty, rest = [], [], []
    for (name, rows, values), meta in zip(writes, metas, strict=True):
        item = None if meta is None else _batch.chunk_item(name, meta, rows, values)
        key = None if meta is None or item else _batch.fill_chunk_key(name, meta, rows, values)
        if item is not None:
            items.append(item)
        elif key is not None:
            empty.append(key)  # all fill values (tags not set): no chunk, as zarr stores it
        else:
            rest.append((name, rows, values))
    await asyncio.gather(_batch.put_all(store, (items,)), *(store.delete(k) for k in empty))
    return rest


def write_rows_direct(folder: Path, name: str, rows: slice, values: np.ndarray) -> bool:
    """Write ``rows`` of array ``name`` of the local store at ``folder`` as its chunk file
    if they are exactly one chunk zarr would encode as :func:`write_chunk` does; False
    (nothing written) otherwise."""
    directory = folder.joinpath(*name.split("/"))
    refuse_links(folder, directory)
    meta = read_array_metadata(directory)
    if meta is None or not values.ndim or rows.step not in (None, 1):
        return False
    chunk_shape = getattr(meta.chunk_grid, "chunk_shape", None)
    start, stop = rows.start or 0, rows.stop
    if chunk_shape is None or start % chunk_shape[0] or stop is None:
        return False
    if stop - start != values.shape[0] or stop > meta.shape[0]:
        return False  # write_chunk checks the rest (shape = the chunk's, dtype, codecs)
    coords = (start // chunk_shape[0], *([0] * (values.ndim - 1)))
    if values.dtype.kind in "OUS":  # strings (tags): only a chunk of fill values here
        return write_fill_chunk(directory, meta, coords, values, root=folder)
    return write_chunk(directory, meta, coords, values, root=folder)


def files_below(folder: Path) -> list[str]:
    """Every plain file below ``folder`` (links not followed)."""
    out: list[str] = []
    for base, _, names in os.walk(folder):
        out.extend(os.path.join(base, n) for n in names)
    return out


def write_into_folder(
    folder: Path, part: str, levels: list[str], jobs: list[Job], attributes: Mapping[str, Any]
) -> tuple[list[Job], bool]:
    """Write ``part``'s groups and the arrays the direct writer can make into a local
    store's ``folder``; returns the jobs it cannot (strings), and whether ``part``'s own
    document was made here."""
    part_dir = folder.joinpath(*part.split("/"))
    new_part = write_group(part_dir, root=folder)  # parts/<p> itself, unless there
    for level in levels:
        write_group(part_dir.joinpath(*level.split("/")), attributes.get(level), root=folder)
    rest = []
    for group, name, values, dims in jobs:
        compressors = _compressors(values.dtype)
        if writable(values, compressors):
            directory = part_dir.joinpath(*(group or "").split("/"), name)
            dims = dims or generic_dims(name, values.ndim)
            write_array(directory, values, compressors, dims, CHUNK_KEYS, root=folder)
        else:
            rest.append((group, name, values, dims))
    return rest, new_part


async def write_through_zarr(store: Any, part: str, rest: list[Job]) -> None:
    """Write ``rest`` through zarr, concurrently, each array created from its own group."""
    from zarr.api.asynchronous import open_group

    async def write(g: Any, name: str, values: np.ndarray, dims: tuple) -> None:
        array = await g.create_array(
            name,
            shape=values.shape,
            dtype=values.dtype,
            chunks=tuple(max(1, s) for s in values.shape),  # one chunk ((), for a scalar)
            compressors=_compressors(values.dtype),
            chunk_key_encoding=CHUNK_KEYS,
            dimension_names=dims or generic_dims(name, values.ndim),
            overwrite=True,
            # one chunk, written whole: no scan for an all-fill chunk to leave out (its
            # file is written instead; same content read back)
            config={"write_empty_chunks": True},
        )
        await array.setitem(..., values)

    wanted = list(dict.fromkeys(group or "" for group, _, _, _ in rest))
    opened = await asyncio.gather(
        *(
            open_group(store=store, path=f"{part}/{n}" if n else part, mode="r+", **ZARR3)
            for n in wanted
        )
    )
    groups = dict(zip(wanted, opened, strict=True))
    await asyncio.gather(*(write(groups[g or ""], n, v, d) for g, n, v, d in rest))
