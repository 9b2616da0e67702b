"""The base of every configuration model: one rule for what a YAML value may be.

Every spec (workflow, descriptors, training, cluster) derives from :class:`SpecModel`:
frozen, unknown keys refused, no infinity or NaN, and strict about types, so that YAML's
``true`` is no number (``r_cut: true`` is not a 1 Å cutoff, ``epochs: true`` not 1
epoch), a number or a string no boolean (``overwrite: 1`` or ``"on"``), and a quoted
``"5"`` no number. An integer still fills a float field. YAML has no tuples and no paths:
a field annotated :data:`FromYaml` (a tuple, a path) takes a list or a string, while its
items stay strict.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from pydantic import BaseModel, ConfigDict, Strict

__all__ = ["FromYaml", "SpecModel"]

T = TypeVar("T")

#: A field YAML writes in another form: a tuple as a list, a path as a string (the items
#: of the tuple are still strict: ``hidden: [true, true]`` is refused).
FromYaml = Annotated[T, Strict(False)]


class SpecModel(BaseModel):
    """Frozen, strict configuration model (see the module docstring)."""

    # protected_namespaces=(): fields such as ``model_dir`` are ours; pydantic < 2.10 warned
    # of a conflict with its ``model_`` namespace on every import (pyproject allows 2.6)
    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, strict=True, protected_namespaces=()
    )
