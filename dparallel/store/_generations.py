"""Generations of a store on object storage: how an overwrite is atomic without rename.

The zarr group lives in ``<url>/g-<time>-<token>/``; the pointer ``<url>/dparallel.json``
(``{"dparallel_pointer": 1, "current": …, "building": …}``) names the current one and is
replaced by one ETag-matched write once a replacement is complete. Readers resolve it once
(docs/store-format.md, "On object storage").
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import secrets
from typing import TYPE_CHECKING, Any

from dparallel.errors import StoreError, StoreMismatchError
from dparallel.store import _objects

if TYPE_CHECKING:
    from dparallel.io.location import Location

__all__ = [
    "LEASE_KEY",
    "POINTER_KEY",
    "foreign_names",
    "new_generation",
    "read_pointer",
    "refuse_foreign",
    "resolve",
    "write_pointer",
]

POINTER_KEY = "dparallel.json"
#: The lease object's key below a store's URL.
LEASE_KEY = "dparallel.lease"
_PREFIX = "g-"
#: What :func:`new_generation` names: ``g-<UTC time>-<8 hex>``, never a user's store name.
_NAME = re.compile(r"g-\d{8}T\d{6}-[0-9a-f]{8}")


def new_generation() -> str:
    """A fresh generation name (sortable by creation time)."""
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S")
    return f"{_PREFIX}{stamp}-{secrets.token_hex(4)}"


def is_generation(name: str) -> bool:
    """Whether a top-level name below a store's URL is a generation."""
    return _NAME.fullmatch(name) is not None


def foreign_names(url: Location, names: list[str] | None = None) -> list[str]:
    """The top-level names below ``url`` (``names``, where listed already) that are not a
    store's (neither the pointer, the lease nor a generation); ``[]`` where ``url`` holds a
    dparallel store without generations (a local store uploaded as it is, its
    ``zarr.json`` at the top)."""
    names = url.names() if names is None else names
    if "zarr.json" in names and _a_store_at_the_top(url):
        return []
    return [n for n in names if n not in (LEASE_KEY, POINTER_KEY) and not is_generation(n)]


def _a_store_at_the_top(url: Location) -> bool:
    """Whether ``url``'s top ``zarr.json`` is a dparallel store's (its ``dparallel``
    attributes), not any zarr group of a user's."""
    found = _objects.get(url.child("zarr.json"))
    try:
        document = json.loads(found[0]) if found is not None else None
    except ValueError:
        return False
    attributes = document.get("attributes") if isinstance(document, dict) else None
    return isinstance(attributes, dict) and isinstance(attributes.get("dparallel"), dict)


def refuse_foreign(url: Location, names: list[str] | None = None) -> None:
    """Raise :class:`StoreMismatchError` where ``url`` holds objects no store made
    (``names``: its top-level names, where listed already)."""
    foreign = foreign_names(url, names)
    if foreign:
        raise StoreMismatchError(
            f"{url} holds objects that are not a dparallel store ({', '.join(foreign)[:200]}); "
            "dparallel writes a store only under an empty prefix or its own store"
        )


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
    with _objects.service_failed(url, "publishing the pointer"):
        if etag is None:
            return _objects.put_if_absent(where, body) is not None
        return _objects.put_if_match(where, body, etag) is not None


def resolve(url: Location) -> Location | None:
    """Where the store at ``url`` keeps its zarr group: its current generation, the URL
    itself for a store without generations, or ``None`` when there is no store."""
    found = read_pointer(url)
    if found is not None and found[0].get("current"):
        return url.child(found[0]["current"])
    return url if url.child("zarr.json").is_file() else None
