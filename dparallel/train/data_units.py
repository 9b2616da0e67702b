"""Which units the data a model was trained from came in (``data_units.json``).

A model works in Å and eV whatever its data, but evaluating it on another file of the same
data needs that file's units: a model directory records the store's ``config.ingest.units``
(:func:`~dparallel.train.train` writes it beside ``model.pt``) and ``dparallel evaluate``
reads data in them unless told otherwise (with a warning).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from dparallel._files import write_file

if TYPE_CHECKING:
    import os

    from dparallel.store import Store

DATA_UNITS_JSON = "data_units.json"


def store_data_units(store: Store) -> str | None:
    """The units of the store's source file (``config.ingest.units``), if recorded."""
    try:
        units = store.attrs["config"]["ingest"]["units"]
    except (KeyError, TypeError):
        return None
    return units if isinstance(units, str) else None


def record_data_units(model_dir: str | os.PathLike[str], store: Store) -> None:
    """Write ``data_units.json`` in ``model_dir``: the units of the store's source file
    (:func:`store_data_units`), if recorded, and the store's location. Written once, by
    :func:`~dparallel.train.train` (a store at a URL as a local one)."""
    units = store_data_units(store)
    if units is not None:
        doc = {"data_units": units, "store": str(store.location)}
        write_file(Path(model_dir) / DATA_UNITS_JSON, json.dumps(doc, indent=1) + "\n")


def recorded_data_units(model_dir: str | os.PathLike[str]) -> str | None:
    """The units recorded by :func:`record_data_units` (``model_dir`` or a file in it)."""
    path = Path(model_dir)
    if path.suffix == ".pt" or path.is_file():
        path = path.parent
    try:
        units = json.loads((path / DATA_UNITS_JSON).read_text()).get("data_units")
    except (OSError, ValueError, AttributeError):
        return None
    return units if isinstance(units, str) else None
