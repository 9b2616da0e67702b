"""What a descriptor spec's ``build(context)`` may be handed by the layers above."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dparallel.errors import DescriptorError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["BuildContext"]


@dataclass(frozen=True)
class BuildContext:
    """What a config model's ``build(context)`` may need from the layers above.

    ``data_units``: the dataset's unit system (files a spec points to may follow it);
    ``readers``: file readers by name, given by the caller (the workflow passes
    ``{"n2p2_input_nn": dparallel.n2p2.acsf_from_input_nn}``), so a descriptor's spec
    can name a file format whose parser lives in a higher layer.
    """

    data_units: str = "ase"
    readers: Mapping[str, Callable[..., Any]] = field(default_factory=dict)

    def reader(self, name: str) -> Callable[..., Any]:
        """The reader ``name``; a :class:`DescriptorError` if the caller gave none."""
        if name not in self.readers:
            raise DescriptorError(f"no {name!r} reader given to build this descriptor spec")
        return self.readers[name]
