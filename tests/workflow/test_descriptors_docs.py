"""docs/descriptors.md documents every key; the shipped example file featurizes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dparallel.workflow.descriptors_spec import (
    ACSFSpec,
    DescriptorsSpec,
    NeighborSumSpec,
    load_descriptors,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "descriptors.md"
EXAMPLE = ROOT / "examples" / "descriptors.yaml"


@pytest.mark.parametrize("model", [DescriptorsSpec, ACSFSpec, NeighborSumSpec])
def test_every_key_is_in_a_table_row(model) -> None:
    rows = {m.group(1) for m in re.finditer(r"^\| `(\w+)` \|", DOC.read_text(), re.M)}
    assert set(model.model_fields) <= rows, set(model.model_fields) - rows


def test_example_file_featurizes_with_the_documented_feature_count(tmp_path) -> None:
    from dparallel.datasets import write_emt_cu
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    descriptors = load_descriptors(EXAMPLE)
    assert descriptors.derivatives and descriptors.neighbor_sum is None
    data = write_emt_cu(tmp_path / "cu.extxyz", 3, seed=0)
    store = featurize_in_process(
        data, tmp_path / "f.zarr", descriptors, FeaturizeOptions(partition_atoms=1000)
    )
    values = store.read_features(0, "acsf", derivatives=False)["Cu"]["values"]
    # docs: len(radial)·n + (len(narrow) + len(wide))·n(n+1)/2 with n = 1 element
    assert values.shape == (store.n_atoms, 4 + 3)
    assert README_USES_EXAMPLE in (ROOT / "README.md").read_text()


README_USES_EXAMPLE = "--descriptors examples/descriptors.yaml"
