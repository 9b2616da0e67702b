"""Training's scaling statistics (:func:`dparallel.train.preparation.prepare`): from the
store's record, or over the training split where the store has none (one trained with
``allow_incomplete`` before featurize finished). Both through one function,
:class:`dparallel.store.stats.FeatureStats`, and equal to numpy's min, max, mean and
sigma (n − 1) of the rows read from the store's arrays."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
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
