"""Preparing a training run: the data (splits, reference energies, scaling) and the model.

:func:`prepare` makes one pass over the store; :func:`build_model` turns it and the spec
into the network the epochs update (its optimizer: :mod:`~dparallel.train.optimizers`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from ase.data import atomic_numbers

from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.descriptors.feature_ranges import constant_features
from dparallel.descriptors.registry import descriptor_kind
from dparallel.errors import TrainingError
from dparallel.nn import HDNNP
from dparallel.store.stats import FeatureStats, merge_into, statistics_of, summaries
from dparallel.train.splits import SplitIndex, build_split_index

if TYPE_CHECKING:
    from dparallel.store import Store
    from dparallel.train.device import Target
    from dparallel.train.init_from import Source
    from dparallel.train.spec import TrainingSpec
    from dparallel.types import StructureBatch

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """What one pass over the store gives: splits, elements, reference energies, statistics."""

    store: Store
    elements: list[str]
    index: SplitIndex
    forces: bool
    ref_energy: np.ndarray
    energy_scale: float
    statistics: dict[str, dict[str, list]]
    descriptor_spec: dict[str, Any] | None


def _feature_config(
    store: Store, spec: TrainingSpec, descriptors: DescriptorSet | None
) -> tuple[dict[str, Any], bool, DescriptorSet | None]:
    """The spec of the trained descriptor, whether the store holds its dG/dr, and the set
    whose statistics training computes (``None``: the store's featurize recorded them).

    A store featurized with the descriptor gives its spec (``descriptors``, if given, must
    say the same); one without it (made by ``dparallel ingest``) takes it from
    ``descriptors``, computed during training (``descriptor_source: computed``).
    """
    name = spec.descriptor
    cfg = store.attrs.get("config", {}).get("features") or {}
    stored = cfg.get(name)
    given = _given_spec(descriptors, name)
    if stored:
        if given is not None and _plain(given) != _plain(stored):
            raise TrainingError(
                f"{store.target} was featurized with other {name!r} descriptors than the "
                "ones given: train without descriptors (the store's are used), or featurize "
                "again with these"
            )
        return stored, bool(cfg.get("derivatives", False)), None
    if given is not None and spec.descriptor_source == "computed":
        assert descriptors is not None
        return (
            _plain(given),  # as a store holds it: the model file and checkpoint keep it
            False,
            DescriptorSet({name: descriptors.by_name[name]}, dtype=descriptors.dtype),
        )
    held = [k for k, v in cfg.items() if k not in ("derivatives", "dtype") and v]
    if given is not None:
        raise TrainingError(
            f"{store.target} holds no {name!r} features: the descriptors given are computed "
            "during training, with descriptor_source: computed (--descriptor-source "
            "computed); or featurize the store with them"
        )
    if held:
        raise TrainingError(
            f"{store.target} was featurized without {name!r} (it holds {', '.join(held)}): "
            f"train with descriptor: {held[0]}, or featurize again with a {name} section"
        )
    raise TrainingError(
        f"{store.target} holds structures but no descriptors (made by dparallel ingest): "
        "featurize its data (dparallel featurize DATA -o STORE --descriptors FILE), or "
        "compute the descriptors during training (dparallel train --descriptors FILE "
        "--descriptor-source computed; in Python train(..., descriptors=...) with "
        "descriptor_source: computed)"
    )


def _given_spec(descriptors: DescriptorSet | None, name: str) -> dict[str, Any] | None:
    """The spec (``to_dict``) of descriptor ``name`` in ``descriptors`` (None: none given)."""
    if descriptors is None:
        return None
    if descriptors.by_name.get(name) is None:
        raise TrainingError(
            f"the descriptors given have no {name!r} (they hold "
            f"{', '.join(descriptors.by_name)}): add a {name} section, or train with "
            f"descriptor: {next(iter(descriptors.by_name))}"
        )
    return dict(descriptors.to_dict()[name])


def _plain(spec: Mapping[str, Any]) -> Any:
    """``spec`` as the store's JSON attributes hold it (tuples as lists), for comparing."""
    return json.loads(json.dumps(spec))


def _refuse_empty(store: Store) -> None:
    """A :class:`TrainingError` for a store without structures (every one skipped when it
    was made: descriptors for other elements, say, under ``on_error=skip``)."""
    if store.n_structures == 0 and (store.is_complete or store.skipped()):
        # (none done yet is no skipping: the completeness check and the split say that)
        raise TrainingError(
            f"{store.target}: holds no structures: all {len(store.skipped())} were skipped "
            f"when it was made (`dparallel info {store.target}` says why)"
        )


def prepare(store: Store, spec: TrainingSpec, descriptors: DescriptorSet | None = None) -> Prepared:
    """Split index, least-squares reference energies and feature scaling (one pass).

    ``descriptors``: for a store without the trained descriptor's features (made by
    ``dparallel ingest``) and ``descriptor_source: computed``, the descriptors to compute;
    their scaling statistics are computed in the same pass, over every structure of the
    store, as featurize records them. For a featurized store they must be the store's.
    """
    _refuse_empty(store)
    desc, has_deriv, computing = _feature_config(store, spec, descriptors)
    if "elements" not in desc:
        raise TrainingError(f"descriptor spec of {spec.descriptor!r} lists no elements")
    elements = [str(elem) for elem in desc["elements"]]
    forces = spec.force_weight > 0
    if forces and not has_deriv and spec.descriptor_source == "stored":
        raise TrainingError(
            f"{store.target} was featurized without derivatives: force training from stored "
            "descriptors needs them (featurize with derivatives=True), or compute them "
            "during training (descriptor_source: computed), or set force_weight=0"
        )
    # least squares E_s ≈ Σ_e n_{s,e} ref_e over training structures (normal equations),
    # accumulated partition by partition during the split pass
    zs = np.array([atomic_numbers[elem] for elem in elements])
    ata = np.zeros((len(elements), len(elements)))
    atb = np.zeros(len(elements))
    per_atom: list[tuple[np.ndarray, np.ndarray]] = []  # (S_train, n_el) counts, (S_train,) E
    atoms_in_training = np.zeros(len(elements), dtype=np.int64)
    labelled = np.zeros((2, 3), dtype=np.int64)  # per split: structures with a label; forces
    computed: dict[str, FeatureStats] = {}  # statistics of ``computing``'s descriptors

    def visit(p: int, batch: StructureBatch, split: np.ndarray) -> None:
        nonlocal ata, atb
        if computing is not None:
            _refuse_other_elements(store, p, batch, zs, elements)
            for elem, found in statistics_of(computing.compute(batch))[spec.descriptor].items():
                merge_into(computed, elem, found)
        training_atoms = batch.numbers[(split == 0)[batch.structure_index]]
        atoms_in_training[:] += (training_atoms[:, None] == zs).sum(0)
        labelled[:] += [np.bincount(split[m], minlength=3) for m in _labelled(batch, forces)]
        sel = np.flatnonzero((split == 0) & np.isfinite(batch.energy))
        if sel.size == 0:
            return
        comp = np.stack(
            [np.bincount(batch.structure_index, batch.numbers == z, batch.n_structures)
             for z in zs], 1,
        )[sel]  # fmt: skip
        ata += comp.T @ comp
        atb += comp.T @ batch.energy[sel]
        per_atom.append((comp, batch.energy[sel]))

    index = build_split_index(store, spec.validation_fraction, spec.test_fraction, spec.seed, visit)
    _refuse_unfit_split(store, spec, index, elements, atoms_in_training)
    _warn_empty_splits(store, spec, index)
    _refuse_no_labels(store, spec, index, labelled, energies=bool(per_atom))
    ref = np.linalg.lstsq(ata, atb, rcond=None)[0]  # zeros without energies: forces alone
    resid = np.concatenate([(energy - c @ ref) / c.sum(1) for c, energy in per_atom] or [[]])
    energy_scale = float(resid.std()) if resid.size > 1 and resid.std() > 1e-8 else 1.0
    per_atom.clear()
    stats = store.attrs.get("statistics", {}).get(spec.descriptor)
    if computing is not None:  # computed in the split pass, over every structure
        stats = _computed_statistics(store, spec.descriptor, computed, computing)
    elif not stats:  # a store still being featurized: its done partitions' statistics
        merged = store.merged_statistics().get(spec.descriptor, {})
        stats = summaries(merged)
    return Prepared(
        store=store,
        elements=elements,
        index=index,
        forces=forces,
        ref_energy=ref,
        energy_scale=energy_scale,
        statistics=_scaling_statistics(store, spec, stats, elements),
        descriptor_spec=dict(desc) if isinstance(desc, Mapping) else None,
    )


def _scaling_statistics(
    store: Store, spec: TrainingSpec, stats: Mapping[str, Any], elements: list[str]
) -> dict[str, dict[str, list]]:
    """Each element's min, max, mean and sigma lists; a :class:`TrainingError` for an
    element without them, unless ``init_from`` (the source's scaling is kept)."""
    for elem in elements:
        if elem not in stats and spec.init_from is None:
            raise TrainingError(f"{store.target}: no statistics for element {elem}")
    return {
        elem: {k: list(stats[elem][k]) for k in ("min", "max", "mean", "sigma")}
        for elem in elements
        if elem in stats
    }


def _refuse_unfit_split(
    store: Store,
    spec: TrainingSpec,
    index: SplitIndex,
    elements: list[str],
    atoms_in_training: np.ndarray,
) -> None:
    """A :class:`TrainingError` for an empty training split, or one without an atom of
    some element (its network would stay untrained; with ``init_from`` it keeps the
    source's weights: a warning)."""
    if index.count("train") == 0:
        raise TrainingError(
            f"{store.target}: the training split is empty (validation_fraction "
            f"{spec.validation_fraction:g} and test_fraction {spec.test_fraction:g} of "
            f"{index.count('validation') + index.count('test')} structures "
            "leave none): lower them, or add structures"
        )
    absent = [elem for elem, n in zip(elements, atoms_in_training, strict=True) if n == 0]
    if absent and spec.init_from is not None:  # those networks keep the source's weights
        log.warning(
            "%s: no atom of %s in the training split (%d structures): its network keeps "
            "the weights of %s", store.target, ", ".join(absent), index.count("train"),
            spec.init_from,
        )  # fmt: skip
    elif absent:
        raise TrainingError(
            f"{store.target}: no atom of {', '.join(absent)} in the training split "
            f"({index.count('train')} structures), so its network would stay untrained: "
            "remove it from the descriptors' elements (an n2p2 input.nn: its `elements` "
            "line and symmetry functions) or add structures that hold it"
        )


def _computed_statistics(
    store: Store, name: str, computed: dict[str, FeatureStats], computing: DescriptorSet
) -> dict[str, Any]:
    """The summaries of the elements with atoms; the features constant over the store
    warned of, as featurize warns of a featurized store's (elements without atoms are
    refused by name)."""
    with_atoms = {e: f for e, f in computed.items() if f.count}
    found = constant_features(name, with_atoms, computing.descriptors().get(name))
    if found is not None:
        log.warning("%s: %s", store.target, found)
    return summaries(computed)


def _warn_empty_splits(store: Store, spec: TrainingSpec, index: SplitIndex) -> None:
    """Warn of a validation or test split that a fraction above 0 left empty (a few
    structures: each is drawn alone, by a hash of its index and the seed)."""
    n = index.count("train") + index.count("validation") + index.count("test")
    for split, fraction, loses in (
        ("validation", spec.validation_fraction, "best.pt, early stopping and the schedule "
         "follow the training loss"),
        ("test", spec.test_fraction, "metrics.json has no test errors"),
    ):  # fmt: skip
        if fraction > 0 and index.count(split) == 0:
            log.warning(
                "%s: %s_fraction %g drew none of the %d structures into the %s split: %s; "
                "raise it, add structures, or set it to 0 to say so",
                store.target, split, fraction, n, split, loses,
            )  # fmt: skip


def _labelled(batch: StructureBatch, forces: bool) -> tuple[np.ndarray, np.ndarray]:
    """(S,) bool each: the structure has an energy or (``forces`` trained) a force
    component; it has a force component."""
    with_forces = np.isfinite(batch.forces).any(1)
    has_force = np.bincount(batch.structure_index, with_forces, batch.n_structures) > 0
    return np.isfinite(batch.energy) | (forces & has_force), has_force


def _refuse_no_labels(
    store: Store, spec: TrainingSpec, index: SplitIndex, labelled: np.ndarray, energies: bool
) -> None:
    """A :class:`TrainingError` for a training or validation split without any label that
    training uses (energies; forces with ``force_weight`` > 0): nothing to learn, or a
    validation loss of nothing that would pick the best epoch. A training split with
    forces but no energy trains them alone (reference energies 0, a warning), one with
    energies but no forces while forces are trained, energies alone (a warning).
    ``labelled``: (2, 3) per split code, structures with a trained label; with forces."""
    what = "an energy or forces" if spec.force_weight > 0 else "an energy (force_weight is 0)"
    for code, split, name in ((0, "train", "training"), (1, "validation", "validation")):
        n = index.count(split)
        if n and not labelled[0, code]:
            fix = (
                "label them, or set validation_fraction: 0"
                if split == "validation"
                else "add labelled structures" + ("" if spec.force_weight else ", or train forces")
            )
            raise TrainingError(
                f"{store.target}: no structure of the {name} split ({n}) has {what}: "
                f"nothing to {'validate' if split == 'validation' else 'train'} on; {fix}"
            )
    if not energies:
        log.warning(
            "%s: no structure of the training split (%d) has an energy: training on forces "
            "alone, the energies are learnt up to a constant per element (reference "
            "energies 0)", store.target, index.count("train"),
        )  # fmt: skip
    if spec.force_weight > 0 and not labelled[1, 0]:
        log.warning(
            "%s: no structure of the training split (%d) has forces: training on energies "
            "alone (force_weight %g weighs nothing; set it to 0 to say so, and featurize "
            "without derivatives to save their space)",
            store.target, index.count("train"), spec.force_weight,
        )  # fmt: skip


def _refuse_other_elements(
    store: Store, p: int, batch: StructureBatch, zs: np.ndarray, elements: list[str]
) -> None:
    """A :class:`TrainingError` for an atom of partition ``p`` whose element the
    descriptors do not define (featurize skips or refuses such structures)."""
    outside = ~np.isin(batch.numbers, zs)
    if outside.any():
        atom = int(np.flatnonzero(outside)[0])
        s = int(batch.structure_index[atom])
        index = int(store.partition_source_indices(p)[s])
        raise TrainingError(
            f"{store.target}: structure {index} (partition {p}), atom "
            f"{atom - int(batch.offsets[s])}: atomic number {int(batch.numbers[atom])} is not "
            f"among the descriptors' elements ({', '.join(elements)}): add it to them"
        )


def build_model(
    prep: Prepared, spec: TrainingSpec, target: Target, source: Source | None = None
) -> HDNNP:
    """A freshly initialized network (seeded) with the reference energies and scaling set;
    with ``spec.init_from``, a copy of that model (:mod:`~dparallel.train.init_from`;
    ``source``: loaded already)."""
    torch.manual_seed(spec.seed)
    if spec.init_from is not None:
        from dparallel.train.init_from import initial_model

        start = initial_model(spec, prep.store, prep.elements, prep.descriptor_spec, source)
        model = target.model(start)
        _refuse_n2p2_problems(prep, spec, model)
        return model
    n_features = {elem: len(stats["mean"]) for elem, stats in prep.statistics.items()}
    model = target.model(HDNNP(prep.elements, n_features, spec.hidden, spec.activation))
    # scaling kept as data (n2p2 export writes its statistics), set in the training dtype
    model.set_scaling_from(
        {
            "mode": spec.scaling,
            "smin": spec.scale_min,
            "smax": spec.scale_max,
            "statistics": prep.statistics,
        }
    )
    model.ref_energy.copy_(torch.as_tensor(prep.ref_energy))
    model.energy_scale.fill_(prep.energy_scale)
    _refuse_n2p2_problems(prep, spec, model)
    return model


def _refuse_n2p2_problems(prep: Prepared, spec: TrainingSpec, model: HDNNP) -> None:
    """With ``n2p2_compatible``, a :class:`TrainingError` for what n2p2 cannot evaluate."""
    if spec.n2p2_compatible:
        from dparallel.n2p2.potential import n2p2_problems

        descriptor = descriptor_kind(spec.descriptor).from_dict(prep.descriptor_spec or {})
        problems = n2p2_problems(descriptor, model)
        if problems:
            raise TrainingError("n2p2_compatible: " + "; ".join(problems))


def check_complete(store: Store, spec: TrainingSpec) -> dict[str, Any]:
    """How much of the source the store holds; refuse an incomplete one unless allowed."""
    done = len(store.done_partitions())
    coverage = {
        "store": str(store.target),
        "complete": done == store.n_partitions,
        "partitions_used": done,
        "partitions_total": store.n_partitions,
        "structures_used": store.n_structures,
        "structures_in_source": store.plan.n_structures,
    }
    if coverage["complete"]:
        return coverage
    made = store.made_by  # the command that made it finishes it
    amount = (
        f"{done} of {store.n_partitions} partitions are {made.removesuffix('e')}ed "
        f"({store.n_structures} of {store.plan.n_structures} structures)"
    )
    if not spec.allow_incomplete:
        raise TrainingError(
            f"{store.target} is incomplete: {amount}. Finish it (rerun the same {made} "
            "command), or train on what is there with --allow-incomplete "
            "(allow_incomplete: true)"
        )
    log.warning("training on an incomplete store %s: %s", store.target, amount)
    return coverage
