"""Descriptors as exportable torch graphs: pair vectors → per-atom features, no numpy.

Each descriptor type registers its graph form (``DescriptorKind.graph``,
:mod:`dparallel.descriptors.registry`; for the built-in types
:class:`~dparallel.descriptors.acsf_graph.ACSFGraph` and
:class:`~dparallel.descriptors.neighbor_sum.NeighborSumGraph`). A graph computes the same
numbers as the descriptor's ``compute`` (tested to 1e-10), but from tensors only, with
every data-dependent size produced by a tensor op, so ``make_fx``/``torch.export`` trace it
with unbacked sizes, and autograd gives forces. Inputs: ``vectors`` (P, 3),
``pair_first``/``pair_second`` (P,) int64, ``species`` (N,) int64 index into
``elements``; output (N, W) "source" columns, ``columns(e)`` picks element e's features.
"""

from __future__ import annotations

from typing import Any

from dparallel.descriptors.registry import kind_of
from dparallel.errors import DescriptorError

__all__ = ["descriptor_graph"]


def descriptor_graph(descriptor: Any) -> Any:
    """The graph form of a descriptor of a registered type that has one.

    Raises
    ------
    DescriptorError
        The descriptor's type registered no graph form (``DescriptorKind.graph``).
    """
    kind = kind_of(descriptor)
    if kind.graph is None:
        raise DescriptorError(
            f"descriptor type {kind.name!r} has no torch graph form (DescriptorKind.graph): "
            "register one to export plain-torch files or to differentiate through positions"
        )
    return kind.graph()(descriptor)
