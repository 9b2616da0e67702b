"""Generations of a store on object storage: how an overwrite is atomic without rename.

A store at a URL keeps its zarr group in a *generation*, ``<url>/g-<time>-<token>/``, and
names the current one in the pointer object ``<url>/dparallel.json``:
``{"dparallel_pointer": 1, "current": "g-…" | null, "building": "g-…" | null}``.
Readers resolve the pointer once, when they open the store, and read only that
generation. A writer (holding the lease) builds a replacement as a new generation,
records it as ``building`` (so a killed run resumes it) and publishes it by one
conditional write of the pointer (ETag match) once it is complete; until then every
reader sees the old store. Generations that are neither current nor being built are
deleted when the next writing run starts, so a reader that opened the old store keeps
reading it until then. A plain zarr group at the URL itself (e.g. a local store
uploaded as it is) has no pointer (or none current yet) and is read as it is; replacing
it deletes its layout once the new generation is published.
"""

from __future__ import annotations

import datetime as _dt
import json
import secrets
from typing import TYPE_CHECKING, Any

from dparallel.errors import StoreError
from dparallel.store import _objects

if TYPE_CHECKING:
    from dparallel.io.location import Location

__all__ = ["POINTER_KEY", "new_generation", "read_pointer", "resolve", "write_pointer"]

POINTER_KEY = "dparallel.json"
_PREFIX = "g-"


def new_generation() -> str:
    """A fresh generation name (sortable by creation time)."""
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S")
    return f"{_PREFIX}{stamp}-{secrets.token_hex(4)}"


def is_generation(name: str) -> bool:
    """Whether a top-level name below a store's URL is a generation."""
    return name.startswith(_PREFIX)


def read_pointer(url: Location) -> tuple[dict[str, Any], str | None] | None:
    """The pointer and its ETag (``None`` where the service cannot give one), or ``None``."""
    where = url.child(POINTER_KEY)
    if where.protocol in _objects.SUPPORTED:
        found = _objects.get(where)
        if found is None:
            return None
        data, etag = found
    else:  # a read-only backend: no conditional writes needed to read
        fs, path = where.filesystem()
        try:
            data, etag = bytes(fs.cat_file(path)), None
        except FileNotFoundError:
            return None
    try:
        pointer = json.loads(data)
    except ValueError:
        raise StoreError(f"{where} is not a dparallel pointer (not JSON)") from None
    if not isinstance(pointer, dict) or pointer.get("dparallel_pointer") != 1:
        raise StoreError(f"{where} is not a dparallel pointer")
    return pointer, etag


def write_pointer(url: Location, pointer: dict[str, Any], etag: str | None) -> bool:
    """Write the pointer if it is still the version ``etag`` (``None``: if there is none)."""
    where = url.child(POINTER_KEY)
    body = json.dumps({"dparallel_pointer": 1, **pointer}).encode()
    if etag is None:
        return _objects.put_if_absent(where, body) is not None
    return _objects.put_if_match(where, body, etag) is not None


def resolve(url: Location) -> Location | None:
    """Where the store at ``url`` keeps its zarr group: its current generation, the URL
    itself for a store without generations, or ``None`` when there is no store."""
    found = read_pointer(url)
    if found is not None and found[0].get("current"):
        return url.child(found[0]["current"])
    fs, path = url.child("zarr.json").filesystem()
    return url if fs.exists(path) else None
