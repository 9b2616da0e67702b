"""Training with descriptors computed per batch (``descriptor_source: computed``) == stored."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from _store_fixture import build_store, small_acsf, small_store

from dparallel.errors import ConfigError, TrainingError
from dparallel.train import Batch, BatchPlan, TrainingSpec, iterate_batches, parse_training_spec
from dparallel.train import train as train_model
from dparallel.train.data import PartitionReader
from dparallel.train.device import Target
from dparallel.train.objective import predict_batch, predict_from_geometry
from dparallel.train.preparation import build_model, prepare
from dparallel.train.structure_data import StructureReader, choose_engine
from dparallel.types import StructureBatch

SPEC = TrainingSpec(epochs=3, hidden=(8,), batch_size=3, seed=7, lr=5e-3, shuffle_buffer=5)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return small_store(tmp_path_factory.mktemp("computed"), n=24)


def _readers(store, spec, engine="graph"):  # noqa: ANN001, ANN202
    prep = prepare(store, spec)
    model = build_model(prep, spec, Target.of(spec))
    with torch.no_grad():  # a model whose forces are not tiny
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    stored = PartitionReader(store, spec.descriptor, prep.elements, prep.index, True)
    computed = StructureReader(
        store,
        spec.descriptor,
        prep.descriptor_spec or {},
        prep.elements,
        prep.index,
        True,
        engine=engine,
    )
    return model, stored, computed


def _reference_batch(store, reader: StructureReader, batch: Batch) -> Batch:  # noqa: ANN001
    """``batch`` with float64 descriptors and dG/dr computed directly (ACSF.compute)."""
    rows = []
    for sid in batch.ids.tolist():
        for p in reader.index.partitions:
            hit = np.flatnonzero(reader.index.ids[p] == sid)
            if hit.size:
                rows.append(store.read_partition(p).select(int(hit[0]), int(hit[0]) + 1))
    structures = StructureBatch.concatenate(rows)
    if batch.geometry is not None:
        assert np.array_equal(structures.positions, batch.geometry.positions.numpy())
    feats = small_acsf().compute(structures, derivatives=True, dtype=torch.float64)
    return Batch(batch.ids, batch.atom_counts, batch.structure_index, batch.energy,
                 batch.forces, feats)  # fmt: skip


@pytest.mark.parametrize("engine", ["graph", "kernel"])
def test_computed_energies_and_forces_equal_the_stored_path(store, engine) -> None:  # noqa: ANN001
    """Same model: energies and forces computed per batch == values + dG/dr (predict_batch)."""
    model, stored, computed = _readers(store, SPEC, engine)
    batches = zip(
        iterate_batches(stored, BatchPlan(stored.index, "train", 5, shuffle=True, seed=1, epoch=0)),
        iterate_batches(
            computed, BatchPlan(computed.index, "train", 5, shuffle=True, seed=1, epoch=0)
        ),
        strict=True,
    )
    n = 0
    for b_st, b_co in batches:
        assert (b_co.geometry is not None) == (engine == "graph")
        assert bool(b_co.features) == (engine == "kernel")
        assert np.array_equal(b_st.ids, b_co.ids)
        assert torch.equal(b_st.forces, b_co.forces) and torch.equal(b_st.energy, b_co.energy)
        e_co, f_co = predict_batch(model, b_co, True)
        assert f_co is not None and float(f_co.abs().max()) > 0.1
        # float64 derivatives computed directly: equal to rounding
        ref = _reference_batch(store, computed, b_co)
        e_ref, f_ref = predict_batch(model, ref, True)
        assert f_ref is not None
        assert torch.allclose(e_co, e_ref, rtol=0, atol=1e-10)
        assert torch.allclose(f_co, f_ref, rtol=0, atol=1e-10)
        # the store's own values (float64) and dG/dr (float32, docs/store-format.md)
        e_st, f_st = predict_batch(model, b_st, True)
        assert f_st is not None
        assert torch.allclose(e_co, e_st, rtol=0, atol=1e-10)
        assert torch.allclose(f_co, f_st, rtol=0, atol=1e-6 * float(f_co.abs().max()))
        n += 1
    assert n >= 3


def test_computed_forces_match_finite_differences(store) -> None:  # noqa: ANN001
    model, _, computed = _readers(store, SPEC)
    batch = next(iterate_batches(computed, BatchPlan(computed.index, "train", 1, shuffle=False)))
    geometry = batch.geometry
    assert geometry is not None
    _, f = predict_from_geometry(model, batch, geometry, True)
    assert f is not None
    h = 1e-5
    rng = np.random.default_rng(0)
    for atom in rng.choice(batch.n_atoms, 4, replace=False).tolist():
        for c in range(3):
            pos = [geometry.positions.clone(), geometry.positions.clone()]
            pos[0][atom, c] += h
            pos[1][atom, c] -= h
            ep, em = (predict_from_geometry(model, batch, replace(geometry, positions=p), False)[0]
                      for p in pos)  # fmt: skip
            fd = -(float(ep[0]) - float(em[0])) / (2 * h)
            assert abs(fd - float(f[atom, c])) < 1e-6 * max(1.0, abs(fd)), (atom, c)


@pytest.mark.parametrize("engine", ["graph", "kernel"])
def test_training_computed_follows_the_stored_trajectory(store, tmp_path, engine) -> None:  # noqa: ANN001
    a = train_model(store, tmp_path / "stored", SPEC)
    update = {"descriptor_source": "computed", "compute_with": engine}
    b = train_model(store, tmp_path / "computed", SPEC.model_copy(update=update))
    assert len(a.history) == len(b.history) == SPEC.epochs
    for ra, rb in zip(a.history, b.history, strict=True):
        for k in ("train_loss", "train_force_rmse", "validation_loss", "validation_force_rmse"):
            assert np.isfinite(ra[k]), k
            assert abs(ra[k] - rb[k]) <= 1e-8 * abs(ra[k]), (ra["epoch"], k, ra[k], rb[k])
    assert a.best_epoch == b.best_epoch
    for k, v in a.test.items():
        assert abs(v - b.test[k]) <= 1e-8 * abs(v), k
    spec_json = (tmp_path / "computed" / "spec.json").read_text()
    assert '"descriptor_source": "computed"' in spec_json


def test_store_without_derivatives_trains_forces_only_when_computed(tmp_path) -> None:  # noqa: ANN001
    from dparallel.datasets import write_emt_cu

    data = write_emt_cu(tmp_path / "cu.xyz", 12, seed=3)
    st = build_store(data, tmp_path / "cu.zarr", small_acsf(), derivatives=False,
                     partition_atoms=150)  # fmt: skip
    assert not any("/d/" in name for name in st.arrays())
    spec = SPEC.model_copy(update={"epochs": 2})
    with pytest.raises(TrainingError, match=r"without derivatives.*descriptor_source: computed"):
        train_model(st, tmp_path / "stored", spec)
    update = {"descriptor_source": "computed", "compute_with": "graph"}
    res = train_model(st, tmp_path / "computed", spec.model_copy(update=update))
    rmse = [r["train_force_rmse"] for r in res.history]
    assert all(np.isfinite(rmse)) and rmse[-1] < rmse[0]
    update = {"descriptor_source": "computed", "compute_with": "kernel"}
    kern = train_model(st, tmp_path / "kernel", spec.model_copy(update=update))
    for ra, rb in zip(res.history, kern.history, strict=True):
        assert abs(ra["train_loss"] - rb["train_loss"]) <= 1e-8 * ra["train_loss"]


def test_computed_graph_refuses_the_kalman_filter() -> None:
    with pytest.raises(ConfigError, match="kalman needs dG/dr"):
        parse_training_spec(
            {"descriptor_source": "computed", "compute_with": "graph", "optimizer": "kalman"}
        )
    spec = parse_training_spec(
        {"descriptor_source": "computed", "compute_with": "kernel", "optimizer": "kalman"}
    )
    assert spec.optimizer == "kalman"


def test_auto_engine_is_the_kernel_on_the_cpu_and_the_graph_elsewhere() -> None:
    from dparallel.descriptors._acsf_backends import numba_available

    cpu = "kernel" if numba_available() else "graph"
    assert choose_engine("acsf", "auto", False) == cpu
    assert choose_engine("acsf", "auto", False, device_type="cuda") == "graph"
    assert choose_engine("acsf", "auto", True, device_type="cuda") == "kernel"  # Kalman
    assert choose_engine("neighbor_sum", "auto", False) == "graph"  # no compiled route
    assert choose_engine("acsf", "graph", False) == "graph"
    with pytest.raises(ConfigError, match="descriptor_source"):
        parse_training_spec({"descriptor_source": "on_the_fly"})


def test_kalman_trains_with_the_kernel_engine_as_from_stored(store, tmp_path) -> None:  # noqa: ANN001
    spec = SPEC.model_copy(update={"optimizer": "kalman", "epochs": 2, "batch_size": 4})
    a = train_model(store, tmp_path / "stored", spec)
    update = {"descriptor_source": "computed", "compute_with": "auto"}  # auto: kernel
    b = train_model(store, tmp_path / "kernel", spec.model_copy(update=update))
    for ra, rb in zip(a.history, b.history, strict=True):
        for k in ("train_loss", "validation_loss", "validation_force_rmse"):
            # the filter amplifies the store's float32 dG/dr rounding (~1e-7 after 2 epochs)
            assert abs(ra[k] - rb[k]) <= 1e-5 * abs(ra[k]), (ra["epoch"], k, ra[k], rb[k])


@pytest.mark.parametrize("descriptor", ["acsf", "neighbor_sum"])
def test_computed_follows_the_stored_trajectory_when_a_batch_lacks_an_element(
    tmp_path,  # noqa: ANN001
    descriptor,  # noqa: ANN001
) -> None:
    """A batch without Au gives Au's network zero gradients whether a stored partition has
    Au's empty table (ACSF) or none (neighbor sums) and however descriptors are computed,
    so Adam steps it alike on every path."""
    from _store_fixture import write_emt_alloy

    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.descriptors.neighbor_sum import NeighborSum
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    elements = ["Cu", "Au"]
    desc = {
        "acsf": ACSF.uniform(elements, r_cut=4.2, radial=[(0.05, 0.0), (2.0, 2.7)],
                             narrow=[(0.01, 1.0, 1.0, 0.0)]),
        "neighbor_sum": NeighborSum(elements, r_cut=4.2, n_sensitivities=3, r_min=0.7),
    }[descriptor]  # fmt: skip
    data = write_emt_alloy(tmp_path / "a.xyz", 12, seed=2, repeat=(1, 1, 1), pure=6)
    st = featurize_in_process(data, tmp_path / "a.zarr",
                              DescriptorSet(**{descriptor: desc}, derivatives=True),
                              FeaturizeOptions(partition_atoms=8, overwrite=True))  # fmt: skip
    spec = SPEC.model_copy(
        update={"descriptor": descriptor, "epochs": 2, "batch_size": 2,
                "validation_fraction": 0.25, "test_fraction": 0}
    )  # fmt: skip
    a = train_model(st, tmp_path / "stored", spec)
    for engine in ("graph", "kernel"):
        update = {"descriptor_source": "computed", "compute_with": engine}
        b = train_model(st, tmp_path / engine, spec.model_copy(update=update))
        for ra, rb in zip(a.history, b.history, strict=True):
            for k in ("train_loss", "validation_loss", "validation_force_rmse"):
                assert abs(ra[k] - rb[k]) <= 1e-8 * abs(ra[k]), (
                    engine,
                    ra["epoch"],
                    k,
                    ra[k],
                    rb[k],
                )


@pytest.mark.parametrize("engine", ["graph", "kernel"])
def test_an_ingested_store_trains_as_the_featurized_one(tmp_path, engine) -> None:  # noqa: ANN001
    """Structures only (``dparallel ingest``) plus the descriptors: the same model, epoch
    for epoch, as computed descriptors from a store featurized from the same data (whose
    scaling statistics featurize recorded), and the same errors."""
    from _store_fixture import ingested_store

    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.nn import load_model

    data = write_emt_cu(tmp_path / "cu.xyz", 16, seed=3)
    featurized = build_store(data, tmp_path / "f.zarr", small_acsf(), partition_atoms=150)
    ingested = ingested_store(data, tmp_path / "i.zarr", partition_atoms=150)
    spec = SPEC.model_copy(
        update={
            "epochs": 2,
            "descriptor_source": "computed",
            "validation_fraction": 0.25,
            "compute_with": engine,
        }
    )
    a = train_model(featurized, tmp_path / "featurized", spec)
    b = train_model(ingested, tmp_path / "ingested", spec,
                    descriptors=DescriptorSet(acsf=small_acsf()))  # fmt: skip
    assert len(a.history) == len(b.history) == 2
    for ra, rb in zip(a.history, b.history, strict=True):
        for k in ("train_loss", "train_force_rmse", "validation_loss", "validation_force_rmse"):
            assert np.isfinite(ra[k]) and abs(ra[k] - rb[k]) <= 1e-12 * abs(ra[k]), k
    for k, v in a.test.items():
        assert abs(v - b.test[k]) <= 1e-12 * abs(v), k
    (ma, fa), (mb, fb) = (load_model(r.model_dir / "model.pt") for r in (a, b))
    assert fa["descriptor"] == fb["descriptor"]
    for (name, x), (_, y) in zip(ma.state_dict().items(), mb.state_dict().items(), strict=True):
        assert torch.allclose(x, y, rtol=1e-12, atol=1e-14), name
