"""A store's statistics record and ``--scaling-data`` for an element of the descriptors
that the data lacks: a warning naming it (n2p2's nnp-scaling warns "No statistics for
element"), no ±inf or NaN in the store, and in scaling.data the ±DBL_MAX and NaN rows
nnp-scaling writes (tests/n2p2/test_scaling_data.py compares them)."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import ase.io
import pytest

from dparallel.datasets import write_emt_cu
from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.store import open_store
from dparallel.workflow.featurize import featurize_in_process, write_scaling_data

if TYPE_CHECKING:
    from pathlib import Path


def _finite(value: object) -> bool:
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return not isinstance(value, float) or math.isfinite(value)


def test_an_element_without_atoms_is_named_and_leaves_no_inf_or_nan(tmp_path: Path) -> None:
    data = write_emt_cu(tmp_path / "cu.extxyz", 3, seed=1)
    assert {s for a in ase.io.read(data, ":") for s in a.get_chemical_symbols()} == {"Cu"}
    acsf = ACSF.uniform(["Cu", "Au"], r_cut=4.0, radial=[(0.05, 0.0)], narrow=[])
    with pytest.warns(UserWarning, match=r"acsf: no atom of Au in the dataset") as got:
        store = featurize_in_process(data, tmp_path / "s.zarr", DescriptorSet(acsf=acsf))
    assert str(tmp_path / "s.zarr") in str(got[0].message)
    stats = open_store(tmp_path / "s.zarr").attrs["statistics"]["acsf"]
    assert list(stats) == ["Cu"] and _finite(stats)
    json.dumps(stats, allow_nan=False)  # standard JSON, as other readers of zarr.json need
    write_scaling_data(store, tmp_path / "scaling.data")  # Au: nnp-scaling's rows (tests/n2p2)
    assert "inf" not in (tmp_path / "scaling.data").read_text().lower()
    lines = (tmp_path / "scaling.data").read_text().splitlines()
    rows = [[float(x) for x in line.split()] for line in lines if line[:1] != "#"]
    cu = [r[2:] for r in rows if r[0] == 1]  # Cu (Z 29) before Au (Z 79), as n2p2 orders
    assert len(cu) == acsf.n_features("Cu") and _finite(cu)
    assert [r[0] for r in rows].count(2) == acsf.n_features("Au")
