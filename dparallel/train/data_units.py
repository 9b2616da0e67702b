"""Which units the data a model was trained from came in (``data_units.json``).

A model works in Å and eV whatever its data, but evaluating it on another file of the same
data needs that file's units: a model directory records the store's ``config.ingest.units``
(:func:`~dparallel.train.train` writes it beside ``model.pt``) and ``dparallel evaluate``
reads data in them unless told otherwise (with a warning).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from dparallel._files import write_file

if TYPE_CHECKING:
    from dparallel.store import Store

DATA_UNITS_JSON = "data_units.json"


def record_data_units(
    model_dir: str | os.PathLike[str], store: Store | str | os.PathLike[str]
) -> None:
    """Write ``data_units.json`` in ``model_dir``: the units of the store's (open, or its
    path) source file (``config.ingest.units``), if recorded."""
    try:
        if isinstance(store, (str, os.PathLike)):
            attrs = json.loads((Path(store) / "zarr.json").read_text())["attributes"]["dparallel"]
        else:
            attrs = store.attrs
        units = attrs["config"]["ingest"]["units"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if isinstance(units, str):
        where = store if isinstance(store, (str, os.PathLike)) else store.location
        doc = {"data_units": units, "store": str(where)}
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
