"""DeployedModel and the ASE calculator sent where users send them (a multiprocessing pool,
Dask): a model that had run once gave another process results off by eV, because its
compiled engine read the memory the module's tensors had before pickling moved them."""

from __future__ import annotations

import multiprocessing
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from _deploy_models import hco_acsf, structures, write_model_dir
from _pool_tasks import calculator_energy, predict_energies

from dparallel.ase import Calculator
from dparallel.deploy import DeployedModel, load_deployed
from dparallel.train.export import export_model

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):  # noqa: ANN001, ANN201
    path = write_model_dir(tmp_path_factory.mktemp("model"), hco_acsf())
    export_model(path, artifacts=False)
    return path


def test_a_used_model_and_calculator_sent_to_a_pool_give_their_results_there(model_dir) -> None:  # noqa: ANN001
    frames = list(structures().values())
    model, calc = load_deployed(model_dir), Calculator(model_dir)
    expected = model.predict(frames, stress=True)["energy"]  # run once: its engine is made
    periodic = frames[0]
    energy = calculator_energy(calc, periodic.copy())
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        there = pool.apply_async(predict_energies, (model, frames)).get(timeout=240)
        calc_there = pool.apply_async(calculator_energy, (calc, periodic.copy())).get(timeout=240)
    np.testing.assert_allclose(there, expected, rtol=0, atol=1e-12)
    assert abs(calc_there - energy) < 1e-12
    # and here, after pickling moved the tensors to shared memory
    np.testing.assert_array_equal(model.predict(frames, stress=True)["energy"], expected)


def test_a_model_whose_tensors_moved_then_changed_runs_the_changed_network(model_dir) -> None:  # noqa: ANN001
    """Sending a model through multiprocessing moves its tensors (``share_memory_``); an
    in-place change after that was computed from the old memory by the engine made before."""
    frames = list(structures().values())
    model = load_deployed(model_dir)
    model.predict(frames)  # its engine made, on the tensors where they were
    ForkingPickler.dumps(model)  # moves every tensor to shared memory
    with torch.no_grad():
        for p in model.model.parameters():
            p.mul_(1.5)
    reference = DeployedModel(model.descriptor, pickle.loads(pickle.dumps(model.model)))
    found, expected = (m.predict(frames, stress=True) for m in (model, reference))
    for key in expected:
        np.testing.assert_allclose(found[key], expected[key], rtol=0, atol=1e-12)
