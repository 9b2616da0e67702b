"""The descriptor types dparallel knows, by name: one :class:`DescriptorKind` per type.

Everything outside a descriptor's own module asks this registry instead of naming types:
the descriptors spec (``descriptors: {<name>: …}``), :class:`DescriptorSet`, the store
(``features/<name>/…``), training (``training.descriptor``), model files
(``descriptor_kind``), export, n2p2 and the deployed graph. A new type is one module
(the descriptor class, its config model) plus one :func:`register` call; see
docs/descriptors.md ("Adding a descriptor type"). The built-in types, ``acsf`` and
``neighbor_sum``, are registered at the bottom of this module; their classes load on first
use (NeighborSum needs torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dparallel.descriptors.build_context import BuildContext
from dparallel.errors import DescriptorError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "BuildContext",
    "DescriptorKind",
    "descriptor_kind",
    "kind_of",
    "register",
    "registered",
    "unregister",
]


@dataclass(frozen=True)
class DescriptorKind:
    """One descriptor type and what the rest of dparallel needs to know about it.

    ``name`` is its key everywhere: the spec section, :class:`DescriptorSet`, the store
    group ``features/<name>/<element>`` (``values``, ``atom_index`` and, with
    ``pair_derivatives``, ``d/<F>/…`` per neighbour element; docs/store-format.md) and
    a model file's ``descriptor_kind``.

    ``load()`` returns the descriptor class. Its public protocol is all that the
    store, training, export and the deployed model (``dparallel.deploy.DeployedModel``,
    the ASE calculator, ``dparallel evaluate``) use: ``from_dict(dict)``/``to_dict()``
    (how it is rebuilt from store attributes and model files), ``elements``, ``r_cut`` and
    ``compute(batch, derivatives=, neighbors=, dtype=)`` → ``{element: DescriptorResult}``
    (values, atom rows and, with ``derivatives``, ∂G_i/∂r_ij per pair: forces and virial).
    ``backends``: the values besides ``"auto"`` that its ``compute`` takes as ``backend=``
    (empty: it has one and takes no such argument).
    ``spec()`` returns its config model (pydantic) with ``build(context: BuildContext)``.
    ``numpy_route()`` (optional) says whether the class's torch-free
    ``compute_arrays(batch, derivatives=, neighbors=, dtype=, derivative_dtype=,
    split_derivatives=, backend=)`` can run now; without it the type always computes with torch.
    ``graph()`` (optional) returns the class of its traceable torch form:
    ``graph_class(descriptor)`` is an ``nn.Module`` with ``elements``, ``r_cut``,
    ``forward(vectors (P, 3), pair_first (P,), pair_second (P,), species (N,))`` → (N, W)
    differentiable in ``vectors`` (pairs at or beyond ``r_cut`` ignored) and
    ``columns(element)`` → (F_e,) the element's feature columns of W. With it a type
    trains from computed descriptors, exports to plain torch (``potential.pt2``) and
    gives the deployed model's autograd route (``DeployedModel.energy``).
    ``n2p2``: it is n2p2's symmetry functions (``scaling.data``, n2p2 potentials,
    ``n2p2_compatible`` training); the class then has ``n2p2_order(element)``.
    """

    name: str
    load: Callable[[], type[Any]]
    spec: Callable[[], type[Any]]
    pair_derivatives: bool = True
    numpy_route: Callable[[], bool] | None = None
    graph: Callable[[], type[Any]] | None = None
    n2p2: bool = False
    backends: tuple[str, ...] = ()

    def from_dict(self, data: Mapping[str, Any]) -> Any:
        """The descriptor of this type described by ``data`` (its ``to_dict()``)."""
        return self.load().from_dict(dict(data))


_KINDS: dict[str, DescriptorKind] = {}


def register(kind: DescriptorKind, replace: bool = False) -> DescriptorKind:
    """Add ``kind`` (a name already taken needs ``replace=True``); returns it."""
    if not kind.name.isidentifier():
        raise DescriptorError(f"a descriptor name must be an identifier, got {kind.name!r}")
    if kind.name in _KINDS and not replace:
        raise DescriptorError(f"descriptor type {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove the type ``name`` (tests, plugins); unknown names are an error."""
    descriptor_kind(name)
    del _KINDS[name]


def registered() -> tuple[str, ...]:
    """Names of the registered types, in registration order."""
    return tuple(_KINDS)


def descriptor_kind(name: str) -> DescriptorKind:
    """The registered type ``name``; unknown names list the registered ones."""
    kind = _KINDS.get(name)
    if kind is None:
        known = ", ".join(repr(n) for n in _KINDS)
        raise DescriptorError(f"unknown descriptor type {name!r}; registered: {known}")
    return kind


def kind_of(descriptor: object) -> DescriptorKind:
    """The registered type whose class ``descriptor`` is an instance of."""
    for kind in _KINDS.values():
        if isinstance(descriptor, kind.load()):
            return kind
    known = ", ".join(repr(n) for n in _KINDS)
    raise DescriptorError(f"{type(descriptor).__name__} is no registered descriptor type ({known})")


# ------------------------------------------------------------------ built-in types
def _acsf() -> type[Any]:
    from dparallel.descriptors.acsf import ACSF

    return ACSF


def _acsf_spec() -> type[Any]:
    from dparallel.descriptors.acsf_spec import ACSFSpec

    return ACSFSpec


def _acsf_numpy() -> bool:
    from dparallel.kernels.acsf_numba import numba_available

    return numba_available()


def _acsf_graph() -> type[Any]:
    from dparallel.descriptors.acsf_graph import ACSFGraph

    return ACSFGraph


def _neighbor_sum() -> type[Any]:
    from dparallel.descriptors.neighbor_sum import NeighborSum  # a torch module

    return NeighborSum


def _neighbor_sum_spec() -> type[Any]:
    from dparallel.descriptors.neighbor_sum_spec import NeighborSumSpec

    return NeighborSumSpec


def _neighbor_sum_graph() -> type[Any]:
    from dparallel.descriptors.neighbor_sum import NeighborSumGraph

    return NeighborSumGraph


register(
    DescriptorKind(
        "acsf",
        _acsf,
        _acsf_spec,
        numpy_route=_acsf_numpy,
        graph=_acsf_graph,
        n2p2=True,
        backends=("torch", "numba", "triton"),
    )
)
register(
    DescriptorKind("neighbor_sum", _neighbor_sum, _neighbor_sum_spec, graph=_neighbor_sum_graph)
)
