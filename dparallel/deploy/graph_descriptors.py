"""Descriptors as exportable torch graphs: pair vectors → per-atom features, no numpy.

Each descriptor type registers its graph form (:mod:`dparallel.descriptors.registry`):
:class:`~dparallel.descriptors.acsf_graph.ACSFGraph` and
:class:`~dparallel.descriptors.neighbor_sum.NeighborSumGraph` for the built-in types.
They compute the same numbers as ``compute`` (tested to 1e-10), but from tensors only,
with every data-dependent size produced by a tensor op, so ``make_fx``/``torch.export``
trace them with unbacked sizes, and autograd gives forces. Inputs: ``vectors`` (P, 3),
``pair_first``/``pair_second`` (P,) int64, ``species`` (N,) int64 index into
``elements``; output (N, W) "source" columns, ``columns(e)`` picks element e's features.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dparallel.descriptors.acsf_graph import ACSFGraph
from dparallel.descriptors.neighbor_sum import NeighborSumGraph
from dparallel.descriptors.registry import kind_of

if TYPE_CHECKING:
    __all__ = ["ACSFGraph", "NeighborSumGraph", "descriptor_graph"]


def descriptor_graph(descriptor: Any) -> Any:
    """The graph form of a descriptor of a registered type that has one."""
    kind = kind_of(descriptor)
    if kind.graph is None:
        raise TypeError(f"no graph form for {type(descriptor).__name__}")
    return kind.graph()(descriptor)
