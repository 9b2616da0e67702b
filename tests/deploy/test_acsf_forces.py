"""The compiled predict route (numba ACSF + compiled force contraction) against torch.

References: the torch route of the same model (descriptors, ∂G/∂r and forces all in
torch) and autograd through the torch ACSF backend (F = −∂E/∂positions), on a batch
of a small triclinic periodic cell, a molecule and a lone atom together (several
structures and elements in one call).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _deploy_models import hco_acsf, structures, write_model_dir

from dparallel.train.export import export_model, load_deployed
from dparallel.types import StructureBatch

pytest.importorskip("numba")


@pytest.fixture(scope="module")
def model(tmp_path_factory):  # noqa: ANN001, ANN201
    model_dir = write_model_dir(tmp_path_factory.mktemp("acsf_forces"), hco_acsf())
    export_model(model_dir, artifacts=False)
    return load_deployed(model_dir)


@pytest.mark.parametrize("networks", ["numpy", "autograd"])
def test_compiled_route_equals_torch_route_and_autograd(model, networks) -> None:  # noqa: ANN001
    batch = StructureBatch.from_ase(list(structures().values()))
    engine = model._acsf_forces()
    saved = dict(engine.networks)
    assert all(net is not None for net in saved.values())  # tanh networks: the numpy path
    if networks == "autograd":  # what networks with other activations take
        engine.networks = dict.fromkeys(saved)
    try:
        fast = model.predict(batch, stress=True, backend="numba")
    finally:
        engine.networks = saved
    slow = model.predict(batch, stress=True, backend="torch")
    assert model._compiled("numba") and not model._compiled("torch")
    for key in ("energy", "energies", "forces"):
        np.testing.assert_allclose(fast[key], slow[key], rtol=1e-10, atol=1e-10)
    periodic = np.isfinite(slow["stress"])
    assert periodic.any() and not periodic.all()  # the molecule and the lone atom: NaN
    np.testing.assert_array_equal(periodic, np.isfinite(fast["stress"]))
    np.testing.assert_allclose(fast["stress"][periodic], slow["stress"][periodic], rtol=1e-10)
    pos = torch.tensor(batch.positions, requires_grad=True)
    energy = model.energy(batch, pos)
    (grad,) = torch.autograd.grad(energy.sum(), pos)
    np.testing.assert_allclose(fast["energy"], energy.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(fast["forces"], -grad.numpy(), rtol=1e-9, atol=1e-10)


def test_bookkeeping_is_reused_per_neighbour_list_and_redone_for_new_atoms(model) -> None:  # noqa: ANN001
    atoms = structures()["periodic"]
    batch = StructureBatch.from_ase([atoms])
    nb = model.neighbors(batch)
    model.predict(batch, neighbors=nb)
    engine = model._acsf_forces()
    layout = engine.layout(batch, nb)
    assert engine.layout(batch, nb) is layout  # same list: reused
    swapped = atoms.copy()
    swapped.set_chemical_symbols(swapped.get_chemical_symbols()[::-1])  # same list, new elements
    other = StructureBatch.from_ase([swapped])
    fast = model.predict(other, neighbors=nb, backend="numba")
    slow = model.predict(other, neighbors=nb, backend="torch")
    assert engine.layout(other, nb) is not layout
    np.testing.assert_allclose(fast["forces"], slow["forces"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(fast["energy"], slow["energy"], rtol=1e-12)
