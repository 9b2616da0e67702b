"""A new training that starts from an existing model's weights (``init_from``).

The source is a dparallel model directory (its ``model.pt``) or an n2p2 potential
(``input.nn``, ``scaling.data``, ``weights.XXX.data``; :func:`dparallel.nn.is_n2p2_potential`
tells them apart). The new model starts as exactly the source model: its networks, its
feature scaling (the source's statistics, not the store's) and its energy offsets
(reference energies and energy scale), so it predicts what the source predicts before the
first update. What cannot match is refused (docs/training.md).
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from dparallel.config import differences, resolve_path
from dparallel.descriptors.registry import current_spec_keys
from dparallel.errors import TrainingError
from dparallel.nn import MODEL, is_n2p2_potential, load_model
from dparallel.nn.folders import N2P2_INPUT
from dparallel.train.spec import ARCHITECTURE_KEYS

if TYPE_CHECKING:
    import os
    from pathlib import Path

    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.nn import HDNNP
    from dparallel.store import Store
    from dparallel.train.spec import TrainingSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    """The model a training starts from, as loaded (float64, on the CPU)."""

    file: Path  # named in messages: model.pt or input.nn
    model: HDNNP
    descriptor_kind: str
    descriptor: dict[str, Any] | None


def load_source(path: str | os.PathLike[str], data_units: str | None = None) -> Source:
    """The model in ``path``: a dparallel model directory or an n2p2 potential (read in
    the units its ``input.nn`` declares, else ``data_units``, else Å and eV)."""
    p = resolve_path(path)
    if is_n2p2_potential(p):
        from dparallel.n2p2 import load_potential
        from dparallel.n2p2.declared_units import potential_units

        units = potential_units(p, None, data_units or "ase")
        acsf, model = load_potential(p, units=units)
        return Source(p / N2P2_INPUT, model, "acsf", acsf.to_dict())
    if not p.exists():
        raise TrainingError(
            f"init_from: {p} does not exist: give a dparallel model directory (with {MODEL}) "
            f"or an n2p2 potential directory ({N2P2_INPUT}, scaling.data, weights.XXX.data)"
        )
    model, data = load_model(p, dtype=torch.float64)
    kind = data.get("descriptor_kind")
    return Source(
        p / MODEL if p.is_dir() else p,
        model,
        str(kind) if kind is not None else "acsf",
        data.get("descriptor"),
    )


def source_descriptors(
    path: str | os.PathLike[str], data_units: str | None = None
) -> DescriptorSet:
    """What to featurize data for a training from the model at ``path`` with: the
    descriptors it was trained on, with derivatives (float64); a :class:`TrainingError`
    when its file does not record them."""
    from dparallel.descriptors.descriptor_set import DescriptorSet

    source = load_source(path, data_units)
    if source.descriptor is None:
        raise TrainingError(
            f"{source.file} does not record its descriptors: give a descriptors section "
            "(the ones it was trained on)"
        )
    return DescriptorSet.from_dict({source.descriptor_kind: source.descriptor, "derivatives": True})


def _architecture(model: HDNNP) -> dict[str, Any]:
    """The model's values of :data:`ARCHITECTURE_KEYS` (``None``: a spec cannot say it,
    e.g. other layers for each element)."""
    hidden = {tuple(h) for h in model.hidden.values()}
    acts = {tuple(a) for a in model.activations.values()}
    one_act = None
    if len(acts) == 1:
        (names,) = acts
        if names[-1] == "identity" and len(set(names[:-1])) == 1:
            one_act = names[0]
    scaling = model.scaling or {"mode": "none", "smin": 0.0, "smax": 1.0}
    return {
        "hidden": next(iter(hidden)) if len(hidden) == 1 else None,
        "activation": one_act,
        "scaling": scaling["mode"],
        "scale_min": float(scaling["smin"]),
        "scale_max": float(scaling["smax"]),
    }


def check_spec(spec: TrainingSpec, source: Source) -> None:
    """Refuse a spec that sets a key of :data:`ARCHITECTURE_KEYS` to other than the
    source's, or trains another descriptor type (keys left unset take the source's)."""
    if spec.descriptor != source.descriptor_kind:
        raise TrainingError(
            f"init_from: {source.file} was trained on {source.descriptor_kind!r} descriptors, "
            f"this run trains on {spec.descriptor!r}: set descriptor: {source.descriptor_kind}"
        )
    theirs = _architecture(source.model)
    for key in ARCHITECTURE_KEYS:
        if key not in spec.model_fields_set:
            continue
        ours = getattr(spec, key)
        if ours != theirs[key] and not (key == "hidden" and tuple(ours) == theirs[key]):
            said = "is not one value for every element" if theirs[key] is None else None
            have = said or f"is {list(theirs[key]) if key == 'hidden' else theirs[key]!r}"
            raise TrainingError(
                f"init_from: {source.file}: its model's {key} {have}, the spec sets "
                f"{list(ours) if key == 'hidden' else ours!r}: drop {key} (or --set "
                f"training.{key}=null; the model keeps its own) or set it to the model's, or train "
                "without init_from"
            )


def check_data(
    store: Store, elements: list[str], descriptor: dict[str, Any] | None, source: Source
) -> None:
    """Refuse a store whose ``elements`` are not all the model's or whose ``descriptor``
    spec differs from the one the model was trained on (naming the first differing keys)."""
    extra = [e for e in elements if e not in source.model.elements]
    if extra:
        raise TrainingError(
            f"init_from: {store.target} has element(s) {', '.join(extra)}, which the "
            f"model of {source.file} has no network for (it has "
            f"{', '.join(source.model.elements)})"
        )
    said = descriptor_differences(descriptor, source)
    if said:
        raise TrainingError(
            f"init_from: {store.target}'s {source.descriptor_kind} descriptors are not "
            f"those of {source.file} ({said}): featurize the data with the model's "
            f"descriptors ({how_to_featurize(source)})"
        )


def descriptor_differences(descriptor: dict[str, Any] | None, source: Source) -> str:
    """The first differing entries of ``descriptor`` and the spec ``source`` was trained
    on (``features.Cu[0].rc: 4.0 → 4.5; …``), or ``""`` when they are the same."""
    diff = _leaves(_plain(source.descriptor), _plain(descriptor))
    more = f"; {len(diff) - 3} more" if len(diff) > 3 else ""
    return "; ".join(f"{key or 'spec'}: {_said(a)} → {_said(b)}" for key, a, b in diff[:3]) + more


def _said(value: Any) -> str:  # noqa: ANN401
    """``value`` for a one-line message: its repr, a long list or mapping by its length."""
    text = repr(value)
    if len(text) <= 60 or not isinstance(value, list | dict):
        return text
    return f"[{len(value)} entries]" if isinstance(value, list) else f"{{{len(value)} keys}}"


def how_to_featurize(source: Source) -> str:
    """Where a user finds the descriptors of ``source``, for a message."""
    run = "a workflow with training.init_from and no descriptors section featurizes with them"
    if source.file.name == N2P2_INPUT:
        return f"descriptors: {{acsf: {{n2p2: {source.file}}}}}; or {run}"
    return run


def _leaves(old: Any, new: Any, where: str = "") -> list[tuple[str, Any, Any]]:  # noqa: ANN401
    """``(key path, old, new)`` of each differing value, into mappings and equal-length
    lists (``features.Cu[3].rc``), as :func:`dparallel.config.differences` for mappings."""
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True))
                for d in _leaves(a, b, f"{where}[{i}]")]  # fmt: skip
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for key, a, b in differences(old, new, depth=1)
                for d in _leaves(a, b, f"{where}.{key}" if where else key)]  # fmt: skip
    return [] if old == new else [(where, old, new)]


def _plain(spec: Any) -> Any:
    """A descriptor spec as JSON holds it (tuples as lists, the current type key)."""
    return json.loads(json.dumps(current_spec_keys(spec)))


def spec_source(spec: TrainingSpec, store: Store) -> Source:
    """The model of ``spec.init_from`` (an n2p2 potential in the store's data units unless
    it declares its own), checked against the spec: before the pass over the store."""
    from dparallel.train.data_units import store_data_units

    assert spec.init_from is not None
    source = load_source(spec.init_from, store_data_units(store))
    check_spec(spec, source)
    return source


def initial_model(
    spec: TrainingSpec,
    store: Store,
    elements: list[str],
    descriptor: dict[str, Any] | None,
    source: Source | None = None,
) -> HDNNP:
    """A copy of the model of ``spec.init_from`` (``source``, if loaded already by
    :func:`spec_source`), checked against the spec and the store (its ``elements`` and
    ``descriptor`` spec): its weights, feature scaling and energy offsets as they are
    (float64, on the CPU)."""
    source = source or spec_source(spec, store)
    check_data(store, elements, descriptor, source)
    log.info(
        "starting from %s: its weights, feature scaling and energy offsets (the store's "
        "statistics and reference energies are not used)",
        source.file,
    )
    return copy.deepcopy(source.model)
