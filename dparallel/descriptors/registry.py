"""The descriptor types dparallel knows, by name: one :class:`DescriptorKind` per type.

Everything outside a descriptor's own module (the spec, :class:`DescriptorSet`, the store,
training, model files, export, n2p2, the deployed graph) asks this registry instead of
naming types; a new type is one module plus one :func:`register` call (docs/descriptors.md,
"Adding a descriptor type"). The built-in ``acsf`` and ``neighbor_sum`` are registered at
the bottom; their classes load on first use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from dparallel.errors import DescriptorError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "DEFAULT_DESCRIPTOR",
    "LEGACY_KIND",
    "BuildContext",
    "DescriptorKind",
    "current_spec_keys",
    "descriptor_graph",
    "descriptor_kind",
    "kind_of",
    "recorded_kind",
    "register",
    "registered",
    "unregister",
]


@dataclass(frozen=True)
class BuildContext:
    """What a config model's ``build(context)`` may need from the layers above.

    ``data_units``: the dataset's unit system (files a spec points to may follow it);
    ``readers``: file readers by name, given by the caller (the workflow passes
    ``{"n2p2_input_nn": dparallel.n2p2.acsf_from_input_nn, "n2p2_units": …}``), so a
    descriptor's spec can name a file format whose parser lives in a higher layer.
    """

    data_units: str = "ase"
    readers: Mapping[str, Callable[..., Any]] = field(default_factory=dict)

    def reader(self, name: str) -> Callable[..., Any]:
        """The reader ``name``; a :class:`DescriptorError` if the caller gave none."""
        if name not in self.readers:
            raise DescriptorError(f"no {name!r} reader given to build this descriptor spec")
        return self.readers[name]


@dataclass(frozen=True)
class DescriptorKind:
    """One descriptor type and what the rest of dparallel needs to know about it.

    ``name`` is its key everywhere (the spec section, the store group
    ``features/<name>/<element>``, a model file's ``descriptor_kind``). ``load()`` returns
    the descriptor class, whose public protocol (``from_dict``/``to_dict``, ``elements``,
    ``r_cut``, ``compute(batch, derivatives=, neighbors=, dtype=)`` →
    ``{element: DescriptorResult}``) is all the store, training, export and the deployed
    model use (an atom's features depend only on its pairs and its neighbours' elements:
    the deployed model computes a large cell's centres in blocks, each with its
    neighbours as a batch of its own); ``spec()`` its pydantic config model with
    ``build(context)``.
    ``pair_derivatives``: it gives ∂G_i/∂r_ij per pair. ``numpy_route()`` (optional): its
    torch-free ``compute_arrays(...)`` can run now. ``graph()`` (optional): the class of its
    traceable torch form (``forward(vectors, pair_first, pair_second, species)`` → (N, W),
    ``columns(element)``), for computed-descriptor training, plain-torch export and
    ``DeployedModel.energy``. ``n2p2``: it is n2p2's symmetry functions (the class has
    ``n2p2_order``). ``backends``: ``compute``'s ``backend=`` values besides ``"auto"``.
    Details: docs/descriptors.md, "Adding a descriptor type".
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


#: The type training uses when none is named (``TrainingSpec.descriptor``).
DEFAULT_DESCRIPTOR = "acsf"

#: The type of files written before they named one: a model file without
#: ``descriptor_kind``, a descriptor spec that named its type ``kind`` (ACSF was the only one).
LEGACY_KIND = "acsf"


def recorded_kind(data: Mapping[str, Any], key: str = "descriptor_kind") -> DescriptorKind:
    """The registered type a model or deployed file names in ``key``; a file written before
    it named one is :data:`LEGACY_KIND`. A :class:`DescriptorError` for a type not registered."""
    name = data.get(key)
    return descriptor_kind(LEGACY_KIND if name is None else str(name))


def current_spec_keys(spec: Any) -> Any:  # noqa: ANN401 - any JSON value
    """A descriptor spec (``to_dict()``) with the one type key: specs written before it
    (``{"kind": "acsf", …}``) read as ``{"type": "acsf", …}``; anything else as it is."""
    if isinstance(spec, dict) and spec.get("kind") == LEGACY_KIND and "type" not in spec:
        return {("type" if k == "kind" else k): v for k, v in spec.items()}
    return spec


def kind_of(descriptor: object) -> DescriptorKind:
    """The registered type whose class ``descriptor`` is an instance of."""
    for kind in _KINDS.values():
        if isinstance(descriptor, kind.load()):
            return kind
    known = ", ".join(repr(n) for n in _KINDS)
    raise DescriptorError(f"{type(descriptor).__name__} is no registered descriptor type ({known})")


# ------------------------------------------------------------------ built-in types
def _attr(name: str) -> Any:  # noqa: ANN401
    """``dparallel.descriptors.<module>.<name>`` from ``"<module>.<name>"``, imported now."""
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(f"dparallel.descriptors.{module}"), attr)


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


def _acsf_numpy() -> bool:
    from dparallel.kernels._backends.availability import numba_expected

    return numba_expected()


register(
    DescriptorKind(
        "acsf",
        partial(_attr, "acsf.ACSF"),
        partial(_attr, "acsf_spec.ACSFSpec"),
        numpy_route=_acsf_numpy,
        graph=partial(_attr, "acsf_graph.ACSFGraph"),
        n2p2=True,
        backends=("torch", "numba", "triton"),
    )
)
register(
    DescriptorKind(
        "neighbor_sum",
        partial(_attr, "neighbor_sum.NeighborSum"),  # a torch module
        partial(_attr, "neighbor_sum_spec.NeighborSumSpec"),
        graph=partial(_attr, "neighbor_sum.NeighborSumGraph"),
    )
)
