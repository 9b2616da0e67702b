"""Elements without atoms and features constant over a whole dataset (zero range), named
as n2p2's ``nnp-scaling`` warns of them ("No statistics for element", "Symmetry function
min equals max"): a neighbour element never within the cutoff of an element, a function
whose Gaussian lies beyond every distance, an element of one atom. Training scales such a
feature by 1 (:func:`dparallel.nn.scaling_parameters`, where n2p2 divides by zero), so its
networks learn nothing from it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["CONSTANT_WIDTH", "Ranges", "constant_features", "range_problems"]

#: A feature whose σ (or max − min) is at most this is constant to the scaling.
CONSTANT_WIDTH = 1e-12
_SHOWN = 8  # features named per element; the rest are counted


class Ranges(Protocol):
    """An element's statistics over a dataset, as far as ranges go (a
    :class:`~dparallel.store.stats.FeatureStats`): atoms, (F,) min and max."""

    @property
    def count(self) -> int: ...
    @property
    def minimum(self) -> np.ndarray: ...
    @property
    def maximum(self) -> np.ndarray: ...


def range_problems(name: str, ranges: Mapping[str, Ranges], descriptor: Any) -> list[str]:
    """What to warn of descriptor ``name``'s statistics (``ranges`` and ``descriptor`` as
    :func:`constant_features` takes them): elements without atoms, constant features."""
    absent = [e for e, r in ranges.items() if r.count == 0]
    found = [] if not absent else [
        f"{name}: no atom of {', '.join(absent)} in the dataset, so no statistics to scale "
        "by and nothing to train its network on: remove it from the descriptors' elements, "
        "or add structures that hold it"
    ]  # fmt: skip
    constant = constant_features(name, ranges, descriptor)
    return found if constant is None else [*found, constant]


def constant_features(name: str, ranges: Mapping[str, Ranges], descriptor: Any) -> str | None:
    """A message naming, per element, the features of descriptor ``name`` whose
    max − min is at most :data:`CONSTANT_WIDTH`, and the fix; ``None`` where none is.

    ``ranges``: element → its statistics over the whole dataset (:class:`Ranges`);
    ``descriptor``: its ``features(element)`` metadata (ACSF's), where it has it, labels
    the features (type, elements, η, rs).
    """
    found = []
    for element, r in ranges.items():
        count, low, high = r.count, np.asarray(r.minimum), np.asarray(r.maximum)
        columns = np.flatnonzero(high - low <= CONSTANT_WIDTH)
        if count == 0 or columns.size == 0:
            continue
        meta = descriptor.features(element) if hasattr(descriptor, "features") else None
        shown = [_label(int(k), meta) for k in columns[:_SHOWN]]
        more = f" and {columns.size - _SHOWN} more" if columns.size > _SHOWN else ""
        found.append(
            f"element {element} ({count} atom{'' if count == 1 else 's'}): {columns.size} of "
            f"{len(low)} features ({', '.join(shown)}{more})"
        )
    if not found:
        return None
    return (
        f"{name}: features constant over the whole dataset (max - min <= {CONSTANT_WIDTH:g}): "
        f"{'; '.join(found)}. They tell no atoms apart: training scales them by 1 (n2p2 "
        "divides by zero) and learns nothing from them. Drop them from the descriptors (a "
        "neighbour element never within r_cut, a function beyond every distance"
        f"{_NEIGHBOR_SUM_HINT if _has_nu(ranges, descriptor) else ''}), or add structures "
        "where they vary"
    )


#: Neighbor sums' sensitivities ν are centred from r_max down to r_min (0.8 Å by default):
#: those closer than any pair the data holds are zero for every atom.
_NEIGHBOR_SUM_HINT = (
    "; neighbor sums: sensitivities centred closer than any pair in the data, so a larger "
    "r_min, about the shortest distance there, or fewer n_sensitivities"
)


def _has_nu(ranges: Mapping[str, Any], descriptor: Any) -> bool:
    """Whether ``descriptor``'s features are neighbor sums' (their metadata gives ν)."""
    if not ranges or not hasattr(descriptor, "features"):
        return False
    return any("nu" in f for f in descriptor.features(next(iter(ranges))))


def _label(column: int, meta: list[dict[str, Any]] | None) -> str:
    """``column`` with its type, elements and parameters where the metadata gives them
    (ACSF: ``neighbors``, η, rs; neighbor sums: ``neighbor``, ν)."""
    if meta is None:
        return str(column)
    f = meta[column]
    around = f.get("neighbors", [f["neighbor"]] if "neighbor" in f else [])
    words = [f"type {f.get('type')}", "-".join([str(f.get("center")), *around])]
    words += [f"{k} {f[k]:g}" for k in ("eta", "rs", "nu") if isinstance(f.get(k), int | float)]
    return f"{column}: {' '.join(words)}"
