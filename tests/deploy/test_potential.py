"""The graph forms of the descriptors and the whole-potential module against the Python
model (``ACSF.compute`` / ``NeighborSum.compute`` and analytic per-pair derivatives)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _deploy_models import ELEMENTS, hco_acsf, hco_neighbor_sum, structures, write_model_dir

from dparallel.deploy import PotentialModule, load_deployed
from dparallel.deploy.probes import inputs_from_atoms
from dparallel.descriptors import ACSF
from dparallel.descriptors.registry import descriptor_graph
from dparallel.errors import TrainingError
from dparallel.types import StructureBatch

ACSF_NON_INTEGER_ZETA = ACSF.uniform(
    ["H", "O"],
    r_cut=3.0,
    cutoff="cos",
    radial=[(0.3, 0.0)],
    narrow=[(0.02, 1.5, 1.0, 0.0)],
    wide=[(0.05, 2.5, -1.0, 0.4)],
)


def _species(descriptor, numbers: np.ndarray) -> torch.Tensor:  # noqa: ANN001
    from ase.data import chemical_symbols

    return torch.tensor([descriptor.elements.index(chemical_symbols[z]) for z in numbers])


DESCRIPTORS = {"acsf": hco_acsf(), "zeta": ACSF_NON_INTEGER_ZETA, "ns": hco_neighbor_sum()}


@pytest.mark.parametrize("descriptor", DESCRIPTORS.values(), ids=DESCRIPTORS.keys())
def test_graph_descriptor_equals_compute(descriptor) -> None:  # noqa: ANN001
    graph = descriptor_graph(descriptor)
    for name, atoms in structures().items():
        symbols = atoms.get_chemical_symbols()
        if not set(symbols) <= set(descriptor.elements):  # H/O only: carbon becomes H
            atoms.set_chemical_symbols(["H" if s == "C" else s for s in symbols])
        pos, _numbers, cell, _, pf, ps, shifts = inputs_from_atoms(atoms, 4.0, torch.float64)
        vectors = pos[ps] - pos[pf] + shifts @ cell
        order = torch.randperm(pf.shape[0], generator=torch.Generator().manual_seed(1))
        source = graph(vectors[order], pf[order], ps[order], _species(descriptor, atoms.numbers))
        ref = descriptor.compute(StructureBatch.from_ase([atoms]))
        for e, r in ref.items():
            got = source[r.atom_index][:, graph.columns(e)]
            torch.testing.assert_close(got, r.values, rtol=0, atol=1e-12, msg=f"{name} {e}")
            if len(atoms) > 1:
                assert r.values.abs().max() > 1e-3  # non-trivial columns


@pytest.mark.parametrize("kind", ["acsf", "neighbor_sum"])
def test_potential_module_equals_deployed_model(kind, tmp_path) -> None:  # noqa: ANN001
    """Autograd through the graph == analytic ∂G/∂r route, energies, forces and stress."""
    from dparallel.train.export import export_model

    descriptor = hco_acsf() if kind == "acsf" else hco_neighbor_sum()
    export_model(write_model_dir(tmp_path, descriptor), artifacts=False)
    deployed = load_deployed(tmp_path)
    potential = PotentialModule(descriptor, deployed.model)
    for name, atoms in structures().items():
        x = inputs_from_atoms(atoms, potential.cutoff + 0.8, torch.float64)  # with a skin
        energy, forces, stress, energies = potential(*x)
        ref = deployed.predict(StructureBatch.from_ase([atoms]), stress=True)
        assert abs(float(energy) - ref["energy"][0]) < 1e-10, name
        np.testing.assert_allclose(forces.numpy(), ref["forces"], rtol=0, atol=1e-10)
        np.testing.assert_allclose(energies.numpy(), ref["energies"], rtol=0, atol=1e-10)
        np.testing.assert_allclose(stress.numpy(), ref["stress"][0], rtol=0, atol=1e-10)
        assert np.isnan(ref["stress"][0]).all() == (not atoms.pbc.all())


def test_neighbor_sum_autograd_energy_route_equals_analytic_forces(tmp_path) -> None:
    """DeployedModel.energy(batch, positions) for neighbor sums: −∂E/∂r == predict forces."""
    from dparallel.train.export import export_model

    export_model(write_model_dir(tmp_path, hco_neighbor_sum()), artifacts=False)
    model = load_deployed(tmp_path)
    batch = StructureBatch.from_ase(list(structures().values()))  # three structures at once
    pos = torch.from_numpy(batch.positions.copy()).requires_grad_(True)
    energy = model.energy(batch, pos)
    (grad,) = torch.autograd.grad(energy.sum(), pos)
    ref = model.predict(batch)
    np.testing.assert_allclose(energy.detach().numpy(), ref["energy"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(-grad.numpy(), ref["forces"], rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", ["acsf", "neighbor_sum"])
def test_a_structure_without_atoms_has_zero_energy_on_every_route(kind, tmp_path) -> None:  # noqa: ANN001
    """0 atoms: energy 0.0 (float64, as for any structure), no forces, on predict with
    and without forces and stress and on the autograd route (``energy``), beside a
    structure with atoms whose numbers are those it has alone."""
    from ase import Atoms

    from dparallel.train.export import export_model

    descriptor = hco_acsf() if kind == "acsf" else hco_neighbor_sum()
    export_model(write_model_dir(tmp_path, descriptor), artifacts=False)
    model = load_deployed(tmp_path)
    empty = Atoms(cell=[6.0, 6.0, 6.0], pbc=True)
    for forces in (False, True):
        for stress in (False, True):
            out = model.predict(StructureBatch.from_ase([empty]), forces=forces, stress=stress)
            assert out["energy"].dtype == np.float64 and out["energy"].tolist() == [0.0]
    atoms = next(iter(structures().values()))
    batch = StructureBatch.from_ase([empty, atoms])
    pos = torch.from_numpy(batch.positions.copy()).requires_grad_(True)
    energy = model.energy(batch, pos)
    alone = model.predict(StructureBatch.from_ase([atoms]))["energy"][0]
    assert float(energy[0]) == 0.0 and abs(float(energy[1]) - alone) < 1e-10
    none = model.energy(StructureBatch.from_ase([empty]), torch.zeros((0, 3), dtype=torch.float64))
    assert none.tolist() == [0.0]


def test_unknown_element_and_mismatched_model_are_refused(tmp_path) -> None:  # noqa: ANN001
    from dparallel.train.export import export_model

    export_model(write_model_dir(tmp_path, hco_acsf()), artifacts=False)
    model = load_deployed(tmp_path).model
    potential = PotentialModule(hco_acsf(), model)
    atoms = structures()["molecule"]
    atoms.numbers[2] = 29
    with pytest.raises(RuntimeError, match="not among the model's"):
        potential(*inputs_from_atoms(atoms, 3.5, torch.float64))
    with pytest.raises(TrainingError, match=r"model elements \['C'\] are not among"):
        PotentialModule(ACSF.uniform(["H", "O"], radial=[(0.5, 0.0)]), model)
    assert potential.elements == ELEMENTS
