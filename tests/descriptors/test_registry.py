"""The descriptor registry: a type defined in a test is accepted everywhere by its name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, Field

from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.descriptors.registry import (
    DescriptorKind,
    descriptor_kind,
    kind_of,
    register,
    registered,
    unregister,
)
from dparallel.errors import ConfigError, DescriptorError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


class Coordination:
    """Toy descriptor: the number of neighbours within ``r_cut`` of each atom."""

    def __init__(self, elements: list[str], r_cut: float) -> None:
        self.elements, self.r_cut = list(elements), float(r_cut)

    def to_dict(self) -> dict[str, Any]:
        return {"elements": self.elements, "r_cut": self.r_cut}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Coordination:
        return cls(data["elements"], data["r_cut"])

    def compute_arrays(self, batch, derivatives, neighbors, dtype, **_: Any) -> dict:  # noqa: ANN001
        from ase.data import chemical_symbols

        counts = np.bincount(neighbors.pair_first, minlength=batch.n_atoms).astype(dtype)
        out = {}
        for e in self.elements:
            rows = np.flatnonzero(np.asarray(chemical_symbols)[batch.numbers] == e)
            out[e] = {"values": counts[rows, None], "atom_index": rows}
        return out


class CoordinationSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    elements: list[str]
    r_cut: float = Field(3.0, gt=0)

    def build(self, context: object = None) -> Coordination:
        return Coordination(self.elements, self.r_cut)


@pytest.fixture
def toy() -> Iterator[DescriptorKind]:
    kind = register(
        DescriptorKind(
            "coordination",
            load=lambda: Coordination,
            spec=lambda: CoordinationSpec,
            pair_derivatives=False,
            numpy_route=lambda: True,
        )
    )
    yield kind
    unregister("coordination")


def test_a_registered_type_is_read_built_computed_and_stored(toy, tmp_path: Path) -> None:
    from dparallel.datasets import write_emt_cu
    from dparallel.workflow.descriptors_spec import load_descriptors
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    assert "coordination" in registered() and descriptor_kind("coordination") is toy
    (tmp_path / "d.yaml").write_text("coordination: {elements: [Cu], r_cut: 2.8}\n")
    dset = load_descriptors(tmp_path / "d.yaml")
    assert isinstance(dset.coordination, Coordination) and dset.acsf is None
    assert dset.r_cut == 2.8 and not dset.uses_torch and kind_of(dset.coordination) is toy
    again = DescriptorSet.from_dict(dset.to_dict())
    assert again.to_dict() == dset.to_dict() and again.coordination.r_cut == 2.8

    data = write_emt_cu(tmp_path / "cu.extxyz", 3, seed=0)
    store = featurize_in_process(
        data, tmp_path / "f.zarr", dset, FeaturizeOptions(partition_atoms=1000)
    )
    values = store.read_features(0, "coordination", derivatives=False)["Cu"]["values"]
    assert values.shape == (store.n_atoms, 1) and values.min() >= 1  # fcc Cu: 12 within 2.8 Å

    with pytest.raises(DescriptorError, match="coordination has no per-pair derivatives"):
        DescriptorSet(coordination=dset.coordination, derivatives=True)


def test_unknown_names_list_the_registered_ones(toy, tmp_path: Path) -> None:
    from dparallel.train.spec import parse_training_spec
    from dparallel.workflow.descriptors_spec import load_descriptors

    listed = "registered: 'acsf', 'neighbor_sum', 'coordination'"
    with pytest.raises(DescriptorError, match=listed):
        descriptor_kind("soap")
    with pytest.raises(DescriptorError, match=listed):
        DescriptorSet(soap=object())
    with pytest.raises(DescriptorError, match=listed):
        DescriptorSet.from_dict({"soap": {"r_cut": 3.0}})
    (tmp_path / "d.yaml").write_text("soap: {r_cut: 3.0}\nacsf: {elements: [Cu], radial: [[1, 0]]}")
    with pytest.raises(ConfigError, match=f"  soap: unknown descriptor type 'soap'; {listed}"):
        load_descriptors(tmp_path / "d.yaml")
    in_training = f"  descriptor: Value error, unknown descriptor type 'soap'; {listed}"
    with pytest.raises(ConfigError, match=in_training):
        parse_training_spec({"descriptor": "soap"})
    assert parse_training_spec({"descriptor": "coordination"}).descriptor == "coordination"
    with pytest.raises(DescriptorError, match="no registered descriptor type"):
        kind_of(object())


def test_register_refuses_a_taken_or_bad_name() -> None:
    acsf = descriptor_kind("acsf")
    with pytest.raises(DescriptorError, match="already registered"):
        register(DescriptorKind("acsf", acsf.load, acsf.spec))
    with pytest.raises(DescriptorError, match="must be an identifier"):
        register(DescriptorKind("two words", acsf.load, acsf.spec))
    assert registered()[:2] == ("acsf", "neighbor_sum") and acsf.load() is ACSF
    with pytest.raises(DescriptorError, match="unknown descriptor type 'coordination'"):
        descriptor_kind("coordination")  # registered only inside the fixture
