"""``dparallel evaluate`` reads DATA's labels under the keys the model's training data was
read with (recorded in ``data_units.json``), unless told otherwise or DATA is n2p2's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch
from ase import Atoms
from ase.calculators.singlepoint import SinglePointCalculator
from ase.io import read, write

from dparallel.ase import Calculator
from dparallel.cli.evaluate import evaluate_file
from dparallel.deploy import DEPLOYED, DeployedModel
from dparallel.descriptors import ACSF
from dparallel.errors import InputFormatError
from dparallel.n2p2 import write_input_data
from dparallel.train import HDNNP
from dparallel.train.data_units import record_data_units, recorded_label_keys
from dparallel.workflow.ingest import IngestOptions, ingest

if TYPE_CHECKING:
    from pathlib import Path

KEYS = {"energy_key": "dft_energy", "forces_key": "dft_forces"}


def _frames() -> list[Atoms]:
    """Cu cells with DFT-style labels and a decoy ``energy`` (what a MACE file holds)."""
    rng = np.random.default_rng(7)
    frames = []
    for n in (2, 3, 4):
        atoms = Atoms(["Cu"] * n, positions=rng.uniform(0, 5, (n, 3)), cell=[6, 6, 6], pbc=True)
        atoms.info["dft_energy"] = float(rng.normal(-3 * n, 1))
        atoms.info["energy"] = 100.0  # not the reference: read only if asked for
        atoms.arrays["dft_forces"] = rng.normal(0, 1, (n, 3))
        frames.append(atoms)
    return frames


def _model(model_dir: Path) -> Path:
    """A deployed random Cu model (a smooth function is all the comparison needs)."""
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.5, 0.0), (1.0, 2.5)], narrow=[])
    torch.manual_seed(0)
    model = HDNNP(["Cu"], {"Cu": acsf.n_features("Cu")}, hidden=[4]).double()
    model.set_scaling("Cu", np.zeros(acsf.n_features("Cu")), 1.0)
    model_dir.mkdir()
    DeployedModel(acsf, model).save(model_dir / DEPLOYED)
    return model_dir


def _reference(model_dir: Path, frames: list[Atoms]) -> dict[str, float]:
    """Errors by numpy: the ASE calculator's predictions against the DFT labels."""
    calc = Calculator(model_dir)
    de = [(calc.get_potential_energy(a) - a.info["dft_energy"]) / len(a) for a in frames]
    df = np.concatenate([calc.get_forces(a) - a.arrays["dft_forces"] for a in frames]).ravel()
    e = np.array(de)
    return {
        "energy_rmse": float(np.sqrt(np.mean(e**2))),
        "energy_mae": float(np.mean(np.abs(e))),
        "force_rmse": float(np.sqrt(np.mean(df**2))),
        "force_mae": float(np.mean(np.abs(df))),
    }


def test_evaluate_defaults_to_the_label_keys_the_model_was_trained_with(tmp_path: Path) -> None:
    data = tmp_path / "dft.extxyz"
    write(data, _frames())
    store = ingest(data, tmp_path / "s.zarr", IngestOptions(**KEYS)).store
    model_dir = _model(tmp_path / "model")
    record_data_units(model_dir, store)  # what train does
    assert recorded_label_keys(model_dir) == KEYS
    frames = read(data, ":")
    want = _reference(model_dir, frames)

    got = evaluate_file(str(model_dir), str(data))
    assert got.pop("n_structures") == len(frames)
    assert got == pytest.approx(want, rel=1e-9, abs=0)

    # n2p2's labels have fixed places: the recorded keys are not applied (no refusal)
    for a in frames:
        a.calc = SinglePointCalculator(
            a, energy=a.info["dft_energy"], forces=a.arrays["dft_forces"]
        )
    n2p2 = write_input_data(tmp_path / "input.data", frames)
    got = evaluate_file(str(model_dir), str(n2p2))
    assert got.pop("n_structures") == len(frames)
    assert got == pytest.approx(want, rel=1e-6, abs=0)  # n2p2's text: ~10 digits

    # a key given wins over the recorded one
    got = evaluate_file(str(model_dir), str(data), energy_key="energy")
    assert got["energy_mae"] > 10  # the decoy 100 eV, not dft_energy
    assert got["force_mae"] == pytest.approx(want["force_mae"], rel=1e-9)

    # a file without the recorded key: refused, saying where the key came from
    for a in frames:
        del a.info["dft_energy"]
    write(tmp_path / "other.extxyz", frames)
    with pytest.raises(InputFormatError, match=r"energy_key 'dft_energy': the key .*model's"):
        evaluate_file(str(model_dir), str(tmp_path / "other.extxyz"))


def test_a_store_read_with_the_default_keys_records_none(tmp_path: Path) -> None:
    data = tmp_path / "d.extxyz"
    write(data, _frames())
    store = ingest(data, tmp_path / "s.zarr").store
    model_dir = _model(tmp_path / "model")
    record_data_units(model_dir, store)
    assert recorded_label_keys(model_dir) == {}
