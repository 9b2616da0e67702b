"""An exported n2p2 potential declares its units; they are used, a contradiction refused."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch
from ase.build import bulk

from dparallel.ase import Calculator
from dparallel.cli.evaluate import _data_units
from dparallel.deploy import DeployedModel
from dparallel.descriptors import ACSF
from dparallel.errors import ConfigError
from dparallel.n2p2 import load_potential, write_potential
from dparallel.n2p2.declared_units import declared_units, potential_units
from dparallel.train import HDNNP
from dparallel.train.data_units import record_data_units, recorded_data_units

if TYPE_CHECKING:
    from pathlib import Path


def _export(directory: Path, units: str) -> None:
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.5, 0.0), (1.0, 2.5)], narrow=[])
    model = HDNNP(["Cu"], {"Cu": acsf.n_features("Cu")}, hidden=[3]).double()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
    model.set_scaling("Cu", np.zeros(acsf.n_features("Cu")), 1.0)
    write_potential(acsf, model, directory, units=units)


@pytest.mark.parametrize("units", ["ase", "bohr-hartree"])
def test_an_export_declares_its_units_and_they_win_over_the_datas(tmp_path, units):
    _export(tmp_path / units, units)
    assert declared_units(tmp_path / units) == units
    other = "bohr-hartree" if units == "ase" else "ase"
    assert potential_units(tmp_path / units, None, other) == units  # not DATA's units
    assert potential_units(tmp_path / units, units, other) == units
    with pytest.raises(ConfigError, match=f"declares units {units}, but {other} was given"):
        potential_units(tmp_path / units, other, other)


def test_ase_and_angstrom_ev_are_one_system(tmp_path):
    _export(tmp_path / "p", "ase")
    assert potential_units(tmp_path / "p", "angstrom-ev", "bohr-hartree") == "angstrom-ev"


def test_a_potential_without_a_declaration_takes_the_default(tmp_path):
    (tmp_path / "input.nn").write_text("# a potential from n2p2 itself\nnumber_of_elements 1\n")
    assert declared_units(tmp_path) is None
    assert potential_units(tmp_path, None, "bohr-hartree") == "bohr-hartree"
    assert potential_units(tmp_path, "ase", "bohr-hartree") == "ase"


def test_the_ase_calculator_uses_the_declared_units(tmp_path):
    """One potential exported in Bohr/Hartree and in Å/eV: the same energy from both."""
    _export(tmp_path / "bohr", "bohr-hartree")
    _export(tmp_path / "ang", "ase")
    atoms = bulk("Cu", "fcc", a=3.6) * (2, 1, 1)
    atoms.calc = Calculator(tmp_path / "ang")
    reference = atoms.get_potential_energy()
    atoms.calc = Calculator(tmp_path / "bohr")  # no units given: the declared ones
    assert atoms.get_potential_energy() == pytest.approx(reference, rel=1e-9)
    wrong = DeployedModel(*load_potential(tmp_path / "bohr", units="ase"))
    assert wrong.cutoff != pytest.approx(atoms.calc.model.cutoff)  # what a default did
    with pytest.raises(ConfigError, match="declares units bohr-hartree"):
        Calculator(tmp_path / "bohr", units="ase")


def test_a_model_records_its_data_units_and_evaluate_defaults_to_them(tmp_path, caplog):
    from types import SimpleNamespace

    # what record_data_units reads of an open Store: its attributes and location
    config = {"ingest": {"units": "bohr-hartree"}}
    store = SimpleNamespace(attrs={"config": config}, location=tmp_path / "s.zarr")
    model = tmp_path / "model"
    model.mkdir()
    assert _data_units(str(model), "in.data", "n2p2", None) == "ase"  # nothing recorded: as before
    record_data_units(model, store)
    assert recorded_data_units(model) == "bohr-hartree"
    assert recorded_data_units(model / "deployed.pt") == "bohr-hartree"
    assert _data_units(str(model), "in.data", "n2p2", None) == "bohr-hartree"
    with caplog.at_level(logging.WARNING):
        assert _data_units(str(model), "in.data", "n2p2", "ase") == "ase"
    assert "trained from bohr-hartree data, DATA is read as ase" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert _data_units(str(model), "in.data", "n2p2", "bohr-hartree") == "bohr-hartree"
    assert caplog.text == ""
