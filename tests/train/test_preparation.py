"""Training's scaling statistics (:func:`dparallel.train.preparation.prepare`): from the
store's record, or merged from its done partitions where the store has none (one trained
with ``allow_incomplete`` before featurize finished). Both through one function,
:class:`dparallel.store.stats.FeatureStats`, and equal to numpy's min, max, mean and
sigma (n − 1) of the rows read from the store's arrays."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
import zarr
from _store_fixture import small_store

from dparallel.store import open_store
from dparallel.train.preparation import prepare
from dparallel.train.spec import TrainingSpec

if TYPE_CHECKING:
    from pathlib import Path

#: every structure in the training split: its statistics are the whole store's
SPEC = TrainingSpec(epochs=1, hidden=(4,), validation_fraction=0, test_fraction=0, seed=7)


def _numpy_statistics(store) -> dict[str, list[float]]:  # noqa: ANN001
    group = zarr.open_group(store=store.zarr_store, mode="r")
    rows = np.concatenate(
        [group[f"parts/{p}/features/acsf/Cu/values"][:] for p in store.done_partitions()]
    ).astype(np.float64)
    assert rows.shape[0] > 100 and store.n_partitions > 1
    return {
        "min": rows.min(0),
        "max": rows.max(0),
        "mean": rows.mean(0),
        "sigma": rows.std(0, ddof=1),
    }


def test_the_statistics_computed_in_training_are_those_featurize_records(tmp_path: Path) -> None:
    # the training split's statistics were numpy's (float sums), the store's exact sums:
    # one store gave two scalings, by whether featurize had finished
    store = small_store(tmp_path)
    recorded = prepare(store, SPEC).statistics["Cu"]
    reference = _numpy_statistics(store)
    for key, expected in reference.items():
        np.testing.assert_allclose(recorded[key], expected, rtol=1e-13, atol=0, err_msg=key)
    np.testing.assert_array_equal(recorded["min"], reference["min"])
    np.testing.assert_array_equal(recorded["max"], reference["max"])
    unrecorded = open_store(store.target, mode="r+")
    unrecorded.update_attrs({"statistics": {}})
    assert prepare(unrecorded, SPEC).statistics["Cu"] == recorded


def test_an_incomplete_store_scales_by_its_done_partitions_not_the_training_split(
    tmp_path: Path,
) -> None:
    # it computed the training split's statistics, read again from every feature: with a
    # validation split they were not those of the done partitions (nnp-scaling's are over
    # the whole data set, and featurize records them over every partition)
    store = small_store(tmp_path)
    writable = open_store(store.target, mode="r+")
    writable.update_attrs({"statistics": {}})
    writable.clear_done(store.n_partitions - 1)  # as featurize still running leaves it
    incomplete = open_store(store.target)
    spec = SPEC.model_copy(update={"validation_fraction": 0.3, "allow_incomplete": True})
    recorded = prepare(incomplete, spec).statistics["Cu"]
    reference = _numpy_statistics(incomplete)
    for key, expected in reference.items():
        np.testing.assert_allclose(recorded[key], expected, rtol=1e-13, atol=0, err_msg=key)
    np.testing.assert_array_equal(recorded["min"], reference["min"])


def test_statistics_of_an_ingested_store_are_those_featurize_records(tmp_path: Path) -> None:
    """A store of structures only (``dparallel ingest``) with the descriptors given: the
    statistics computed in the split pass are the ones featurize records for the same data
    (exactly, whatever the partitioning) and numpy's of the featurized rows."""
    from _store_fixture import ingested_store, small_acsf

    from dparallel.descriptors.descriptor_set import DescriptorSet

    featurized = small_store(tmp_path)  # partitions of 150 atoms
    data = tmp_path / "cu24.xyz"
    spec = SPEC.model_copy(update={"descriptor_source": "computed", "validation_fraction": 0.2})
    recorded = featurized.attrs["statistics"]["acsf"]["Cu"]
    reference = _numpy_statistics(featurized)
    for atoms in (150, 400):
        ingested = ingested_store(data, tmp_path / f"i{atoms}.zarr", partition_atoms=atoms)
        assert "features" not in ingested.attrs["config"]
        prep = prepare(ingested, spec, DescriptorSet(acsf=small_acsf()))
        got = prep.statistics["Cu"]
        assert got == {k: recorded[k] for k in ("min", "max", "mean", "sigma")}
        for key, expected in reference.items():
            np.testing.assert_allclose(got[key], expected, rtol=1e-13, atol=0, err_msg=key)
        assert prep.descriptor_spec == featurized.attrs["config"]["features"]["acsf"]


def test_an_ingested_structure_outside_the_descriptors_elements_is_named(tmp_path: Path) -> None:
    from _store_fixture import ingested_store, small_acsf, write_emt_alloy

    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.errors import TrainingError

    data = write_emt_alloy(tmp_path / "a.xyz", 6, seed=2, repeat=(1, 1, 1), pure=3)
    store = ingested_store(data, tmp_path / "a.zarr", partition_atoms=8)
    spec = SPEC.model_copy(update={"descriptor_source": "computed"})
    with pytest.raises(TrainingError) as info:
        prepare(store, spec, DescriptorSet(acsf=small_acsf()))  # Cu only
    assert "structure 3 (partition " in str(info.value)
    assert "atomic number 79 is not among the descriptors' elements (Cu)" in str(info.value)


def test_a_training_split_without_energies_trains_forces_or_says_why_not(tmp_path: Path) -> None:
    """No structure with an energy: the reference-energy fit stopped the run with numpy's
    ``need at least one array to concatenate``; with forces it now trains them (reference
    energies 0), without them (force_weight 0) it names what is missing."""
    import ase.io
    from _store_fixture import build_store, small_acsf
    from ase.calculators.singlepoint import SinglePointCalculator

    from dparallel.datasets import write_emt_cu
    from dparallel.errors import TrainingError

    frames = ase.io.read(write_emt_cu(tmp_path / "cu.xyz", 6, seed=3), ":")
    for atoms in frames:
        atoms.calc = SinglePointCalculator(atoms, forces=atoms.get_forces())
    ase.io.write(tmp_path / "forces.xyz", frames, format="extxyz")
    store = build_store(tmp_path / "forces.xyz", tmp_path / "f.zarr", small_acsf())
    prep = prepare(store, SPEC)
    assert prep.ref_energy.tolist() == [0.0] and prep.energy_scale == 1.0
    with pytest.raises(TrainingError, match=r"no structure of the training split \(6\) has an "):
        prepare(store, SPEC.model_copy(update={"force_weight": 0.0}))


def test_a_validation_split_without_labels_is_refused(tmp_path: Path) -> None:
    """Its loss was 0.0 every epoch: epoch 0 stayed the best (model.pt) and early stopping
    ended the run; now the split is named before training, with the fixes."""
    import ase.io
    from _store_fixture import build_store, small_acsf

    from dparallel.datasets import write_emt_cu
    from dparallel.errors import TrainingError
    from dparallel.train.splits import assign_splits

    spec = SPEC.model_copy(update={"validation_fraction": 0.3, "test_fraction": 0.1})
    frames = ase.io.read(write_emt_cu(tmp_path / "cu.xyz", 12, seed=3), ":")
    split = assign_splits(np.arange(12), np.full(12, None), 0.3, 0.1, spec.seed)
    assert 0 < (split == 1).sum() < 12
    for k, atoms in enumerate(frames):  # the validation structures lose their labels
        atoms.calc = None if split[k] == 1 else atoms.calc
    ase.io.write(tmp_path / "some.xyz", frames, format="extxyz")
    store = build_store(tmp_path / "some.xyz", tmp_path / "s.zarr", small_acsf())
    with pytest.raises(TrainingError, match=r"no structure of the validation split \(\d+\) has "
                       r"an energy or forces: .*validation_fraction: 0"):  # fmt: skip
        prepare(store, spec)


def test_a_fraction_that_draws_no_structure_is_warned(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    """Three structures, fractions 0.1: the validation split (and here the test split) came
    out empty and training silently picked best.pt by its training loss."""
    import logging

    from _store_fixture import build_store, small_acsf

    from dparallel.datasets import write_emt_cu
    from dparallel.train.splits import assign_splits

    spec = SPEC.model_copy(update={"validation_fraction": 0.1, "test_fraction": 0.1, "seed": 0})
    assert (assign_splits(np.arange(3), np.full(3, None), 0.1, 0.1, spec.seed) == 0).all()
    store = build_store(
        write_emt_cu(tmp_path / "cu.xyz", 3, seed=3), tmp_path / "s.zarr", small_acsf()
    )
    with caplog.at_level(logging.WARNING, logger="dparallel"):
        prepare(store, spec)
    said = [r.getMessage() for r in caplog.records if "drew none" in r.getMessage()]
    assert len(said) == 2
    assert "validation_fraction 0.1 drew none of the 3 structures" in said[0]
    assert "best.pt, early stopping and the schedule follow the training loss" in said[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dparallel"):
        prepare(store, SPEC)  # fractions 0: asked for, not warned
    assert not [r for r in caplog.records if "drew none" in r.getMessage()]


def test_computed_features_constant_over_the_store_are_warned(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    """Descriptors computed in training (an ingested store) warn as featurize does: one Au
    per 7.2 Å cell never meets another within r_cut = 4 Å, so its Au-Au function is 0."""
    import logging

    import ase.io
    from _store_fixture import ingested_store
    from ase.build import bulk
    from ase.neighborlist import neighbor_list

    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet

    cells = []
    for k in range(3):
        atoms = bulk("Cu", "fcc", a=3.6, cubic=True).repeat((2, 2, 2))
        atoms[5 * k].symbol = "Au"
        atoms.rattle(0.05, seed=k)
        atoms.info["energy"] = -float(k)
        i, j = neighbor_list("ij", atoms, 4.0)  # the reference: no Au-Au pair
        au = atoms.numbers == 79
        assert not (au[i] & au[j]).any()
        cells.append(atoms)
    ase.io.write(tmp_path / "cells.extxyz", cells)
    store = ingested_store(tmp_path / "cells.extxyz", tmp_path / "i.zarr")
    acsf = ACSF.uniform(["Cu", "Au"], r_cut=4.0, radial=[(0.05, 0.0)], narrow=[])
    spec = SPEC.model_copy(update={"descriptor_source": "computed", "force_weight": 0.0})
    with caplog.at_level(logging.WARNING, logger="dparallel"):
        prepare(store, spec, DescriptorSet(acsf=acsf))
    (said,) = [r.getMessage() for r in caplog.records if "constant" in r.getMessage()]
    au_au = [k for k, f in enumerate(acsf.features("Au")) if f["neighbors"] == ["Au"]]
    assert f"element Au (3 atoms): 1 of 2 features ({au_au[0]}: type 2 Au-Au" in said
    assert "element Cu" not in said


def test_a_training_split_without_forces_trains_energies_and_says_so(
    tmp_path: Path, caplog
) -> None:  # noqa: ANN001
    """Energies only, force_weight 0.03 (the default): trained on energies without a word."""
    import logging

    import ase.io
    from _store_fixture import build_store, small_acsf
    from ase.calculators.singlepoint import SinglePointCalculator

    from dparallel.datasets import write_emt_cu

    frames = ase.io.read(write_emt_cu(tmp_path / "cu.xyz", 6, seed=3), ":")
    for atoms in frames:
        atoms.calc = SinglePointCalculator(atoms, energy=atoms.get_potential_energy())
    ase.io.write(tmp_path / "energies.xyz", frames, format="extxyz")
    assert all("forces" not in a.calc.results for a in ase.io.read(tmp_path / "energies.xyz", ":"))
    store = build_store(tmp_path / "energies.xyz", tmp_path / "e.zarr", small_acsf())
    said = {}
    for weight in (0.03, 0.0):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dparallel"):
            prepare(store, SPEC.model_copy(update={"force_weight": weight}))
        said[weight] = [r.getMessage() for r in caplog.records if "has forces" in r.getMessage()]
    assert said[0.0] == []  # forces not trained: nothing to say
    (text,) = said[0.03]
    assert "no structure of the training split (6) has forces: training on energies" in text
