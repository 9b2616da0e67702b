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


@pytest.fixture
def radial_sum() -> Iterator[DescriptorKind]:
    from _radial_sum import KIND

    yield register(KIND)
    unregister(KIND.name)


@pytest.mark.integration
def test_a_registered_type_trains_exports_and_runs_in_the_calculator(
    radial_sum, tmp_path: Path
) -> None:
    """featurize → train → export → ASE calculator → evaluate with a type dparallel never
    names; forces checked against finite differences of the calculator's energy."""
    import ase.io
    import torch
    from _radial_sum import RadialSum

    from dparallel.ase import Calculator
    from dparallel.cli.evaluate import evaluate_file
    from dparallel.datasets import write_emt_molecules
    from dparallel.deploy import load_deployed
    from dparallel.train import TrainingSpec, train
    from dparallel.train.export import export_model
    from dparallel.types import StructureBatch
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = write_emt_molecules(tmp_path / "molecules.xyz", 20, seed=2)  # H, C, N, O
    toy = RadialSum(["H", "C", "N", "O"], r_cut=4.0, etas=[0.3, 0.8, 2.0])
    dset = DescriptorSet(radial_sum=toy, derivatives=True)
    store = featurize_in_process(
        data, tmp_path / "f.zarr", dset, FeaturizeOptions(partition_atoms=40)
    )
    spec = TrainingSpec(descriptor="radial_sum", epochs=3, hidden=(6,), batch_size=4, seed=0)
    train(store, tmp_path / "m", spec)

    report = export_model(tmp_path / "m")
    assert report["descriptor"] == "radial_sum"
    routes = report["routes"]
    assert routes["torch_export"]["status"] == "ok" and routes["torchscript"]["status"] == "ok"
    assert routes["torch_export"]["max_abs_diff"]["forces"] < 1e-9  # plain torch == deployed.pt

    frames = ase.io.read(data, ":")
    calc = Calculator(tmp_path / "m", skin=0.3)
    atoms = frames[7].copy()  # benzene: 12 atoms
    atoms.calc = calc
    forces, energies = atoms.get_forces(), []
    h = 1e-4
    for i, d in [(0, 0), (3, 1), (6, 2), (11, 0)]:
        for step in (h, -h):
            atoms.positions[i, d] += step
            energies.append(atoms.get_potential_energy())
            atoms.positions[i, d] -= step
    finite = -(np.array(energies[0::2]) - np.array(energies[1::2])) / (2 * h)
    assert np.abs(forces).max() > 1e-3  # a trained, non-trivial potential
    picked = [forces[0, 0], forces[3, 1], forces[6, 2], forces[11, 0]]
    np.testing.assert_allclose(picked, finite, atol=1e-6)

    deployed = load_deployed(tmp_path / "m")  # the autograd route through the graph form
    batch = StructureBatch.from_ase(frames[:4])
    pos = torch.tensor(batch.positions, requires_grad=True)
    (grad,) = torch.autograd.grad(deployed.energy(batch, pos).sum(), pos)
    np.testing.assert_allclose(-grad.numpy(), deployed.predict(batch)["forces"], atol=1e-10)

    res = evaluate_file(str(tmp_path / "m"), str(data))
    errors = []
    for frame in frames:
        reference = frame.get_potential_energy()
        frame.calc = calc
        errors.append((frame.get_potential_energy() - reference) / len(frame))
    assert res["n_structures"] == len(frames)
    assert res["energy_rmse"] == pytest.approx(float(np.sqrt(np.mean(np.square(errors)))), 1e-9)


def test_a_type_without_a_graph_form_exports_deployed_pt_and_reports_why_not_the_rest(
    tmp_path: Path,
) -> None:
    """No ``DescriptorKind.graph``: ``deployed.pt`` and the calculator work, the plain-torch
    routes fail with the reason, and the autograd route says what is missing."""
    from dataclasses import replace

    import torch
    from _radial_sum import KIND, RadialSum
    from ase.build import molecule

    from dparallel.ase import Calculator
    from dparallel.deploy import load_deployed
    from dparallel.nn import HDNNP, model_file
    from dparallel.train.export import export_model
    from dparallel.types import StructureBatch

    register(replace(KIND, graph=None))
    try:
        toy = RadialSum(["H", "C", "O"], r_cut=3.5, etas=[0.5, 1.5])
        torch.manual_seed(0)
        model = HDNNP(toy.elements, dict.fromkeys(toy.elements, 6), hidden=(5,)).double()
        (tmp_path / "m").mkdir()
        torch.save(model_file(model, {}, toy.to_dict(), KIND.name), tmp_path / "m" / "model.pt")
        report = export_model(tmp_path / "m")
        assert report["files"][0] == "deployed.pt"
        for route in ("torch_export", "torchscript"):
            assert report["routes"][route]["status"] == "failed"
            assert "'radial_sum' has no torch graph form" in report["routes"][route]["reason"]
        atoms = molecule("CH3OH")
        atoms.calc = Calculator(tmp_path / "m")
        assert np.isfinite(atoms.get_forces()).all() and np.abs(atoms.get_forces()).max() > 0
        batch = StructureBatch.from_ase([atoms])
        with pytest.raises(DescriptorError, match="no torch graph form"):
            load_deployed(tmp_path / "m").energy(batch, torch.tensor(batch.positions))
    finally:
        unregister(KIND.name)
