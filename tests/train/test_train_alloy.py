"""Two elements (EMT Cu/Au alloy): reference energies, element/pair bookkeeping, forces."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from _store_fixture import build_store, training_route, write_emt_alloy

from dparallel.deploy import load_deployed
from dparallel.descriptors import ACSF
from dparallel.train import (
    TrainingSpec,
    build_split_index,
)
from dparallel.train import train as train_model
from dparallel.train.export import export_model
from dparallel.train.splits import SPLITS


@pytest.fixture(scope="module")
def alloy(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    root = tmp_path_factory.mktemp("alloy")
    acsf = ACSF.uniform(
        ["Cu", "Au"], r_cut=4.2, radial=[(0.05, 0.0), (2.0, 2.7), (2.0, 3.6)],
        narrow=[(0.01, 1.0, 1.0, 0.0)],
    )  # fmt: skip
    store = build_store(
        write_emt_alloy(root / "alloy.xyz", 14, seed=8), root / "a.zarr", acsf, partition_atoms=100
    )
    spec = TrainingSpec(epochs=2, hidden=(6,), batch_size=3, validation_fraction=0.2,
                        test_fraction=0.2, seed=4)  # fmt: skip
    train_model(store, root / "m", spec)
    export_model(root / "m", artifacts=False)
    return store, root / "m", spec


def test_reference_energies_are_least_squares_on_the_training_split(alloy) -> None:  # noqa: ANN001
    store, model_dir, spec = alloy
    index = build_split_index(store, spec.validation_fraction, spec.test_fraction, spec.seed)
    rows, energies = [], []
    for p in index.partitions:
        b = store.read_partition(p)
        for s in np.flatnonzero(index.split[p] == 0):
            nums = b.numbers[b.offsets[s] : b.offsets[s + 1]]
            rows.append([(nums == 29).sum(), (nums == 79).sum()])
            energies.append(b.energy[s])
    ref = np.linalg.lstsq(np.array(rows, float), np.array(energies), rcond=None)[0]
    doc = json.loads((model_dir / "metrics.json").read_text())
    got = doc["reference_energies"]
    np.testing.assert_allclose([got["Cu"], got["Au"]], ref, rtol=1e-10)


def test_alloy_forces_training_route_exported_route_and_fd(alloy) -> None:  # noqa: ANN001
    store, model_dir, _ = alloy
    p = build_split_index(store, 0.0, 0.0, seed=0).partitions[-1]
    batch, e_train, f_train = training_route(store, model_dir, p, ["Cu", "Au"])
    assert batch.features is not None and set(batch.features) == {"Cu", "Au"}
    structures = store.read_partition(p)
    model = load_deployed(model_dir)
    out = model.predict(structures)
    np.testing.assert_allclose(out["energy"], e_train.detach().numpy(), atol=1e-9)
    # the training route reads dG/dr stored in float32 (store format 2): agreement to
    # float32 rounding of the per-pair terms, relative to the largest force component
    f_ref = f_train.detach().numpy()
    np.testing.assert_allclose(out["forces"], f_ref, rtol=0, atol=2e-6 * np.abs(f_ref).max())
    one = structures.select(0, 1)
    f = model.predict(one)["forces"]
    nb = model.neighbors(one)
    h = 1e-4
    for i, c in ((0, 0), (5, 2), (17, 1)):
        e = []
        for sgn in (1, -1):
            pos = one.positions.copy()
            pos[i, c] += sgn * h
            e.append(float(model.energy(one, torch.from_numpy(pos), nb)[0].detach()))
        assert abs(-(e[0] - e[1]) / (2 * h) - f[i, c]) < 1e-7


def test_metrics_name_the_validation_and_test_structures(alloy) -> None:  # noqa: ANN001
    """``test_ids`` and ``validation_ids`` are disjoint source indices of the store, as many
    as the splits count, and the validation ones are those the split index holds out."""
    store, model_dir, spec = alloy
    doc = json.loads((model_dir / "metrics.json").read_text())
    test, validation = set(doc["test_ids"]), set(doc["validation_ids"])
    assert (
        len(test) == doc["splits"]["test"] > 0
        and len(validation) == doc["splits"]["validation"] > 0
    )
    assert not test & validation
    stored = {int(i) for i in store.source_indices()}
    assert test | validation < stored
    index = build_split_index(store, spec.validation_fraction, spec.test_fraction, spec.seed)
    code = SPLITS["validation"]
    held = {int(i) for p in index.partitions for i in index.ids[p][index.split[p] == code]}
    assert held == validation
