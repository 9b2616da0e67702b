"""Package attributes loaded on first use (PEP 562), to keep torch out of light imports.

A package's ``__init__`` maps each torch-heavy name to its submodule; importing the
package (or one of its torch-free submodules) then does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, module_of: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``package.<module_of[name]>`` and returns ``name``."""

    def __getattr__(name: str) -> Any:
        if name not in module_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module_of[name]}"), name)

    return __getattr__
