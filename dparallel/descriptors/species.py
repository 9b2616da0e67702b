"""A descriptor's input as a batch, each atom's index into its element list, and the
floating dtype of its results."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.errors import DescriptorError, UnknownElementError
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["DTYPE_NAMES", "as_batch", "check_dtype_name", "compute_dtype", "species_index"]

#: The dtypes descriptors compute and store in, by name (numpy's and torch's of that name).
DTYPE_NAMES = ("float64", "float32")


def species_index(
    batch: StructureBatch, elements: Sequence[str], what: str = "the descriptor's elements"
) -> np.ndarray:
    """(N,) int64 index into ``elements`` of each atom of ``batch``; an atomic number not
    among them is an :class:`UnknownElementError` naming the structure, the atom and ``what``."""
    from ase.data import atomic_numbers

    lut = np.full(119, -1, dtype=np.int64)
    for n, e in enumerate(elements):
        lut[atomic_numbers[e]] = n
    nums = batch.numbers
    bad = (nums < 0) | (nums > 118)
    idx = np.where(bad, -1, lut[np.clip(nums, 0, 118)])
    if np.any(idx < 0):
        from ase.data import chemical_symbols

        row = int(np.nonzero(idx < 0)[0][0])
        s, number = int(np.searchsorted(batch.offsets, row, side="right") - 1), int(nums[row])
        symbol = f" ({chemical_symbols[number]})" if 0 < number <= 118 else ""
        raise UnknownElementError(
            s,
            f"atom {row - int(batch.offsets[s])}: atomic number {number}{symbol} is not "
            f"among {what} {list(elements)}",
        )
    return idx


def as_batch(structures: Any) -> StructureBatch:
    """StructureBatch from a batch, an ase.Atoms or a list of them."""
    if isinstance(structures, StructureBatch):
        return structures
    import ase

    if isinstance(structures, ase.Atoms):
        structures = [structures]
    return StructureBatch.from_ase(structures)


def check_dtype_name(value: object, name: str = "dtype") -> None:
    """A :class:`DescriptorError` unless ``value`` (the argument ``name``) is one of
    :data:`DTYPE_NAMES`."""
    if value not in DTYPE_NAMES:
        raise DescriptorError(f"{name} must be 'float64' or 'float32', got {value!r}")


def compute_dtype(dtype: Any) -> Any:
    """The torch dtype of a descriptor's ``compute``: ``torch.float32`` or ``torch.float64``
    (``None``: float64); any other (float16, an integer type, …) is a :class:`DescriptorError`."""
    import torch  # here: a spec is read without torch

    dtype = torch.float64 if dtype is None else dtype
    if dtype not in (torch.float32, torch.float64):
        raise DescriptorError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    return dtype
