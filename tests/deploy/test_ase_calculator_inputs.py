"""dparallel.ase.Calculator refuses what it cannot compute with, naming it: non-finite
positions or cell entries (an atom with a NaN coordinate would otherwise drop out of the
neighbour list unnoticed), a thread count torch cannot take, and units other than the Å
and eV a dparallel model works in; a dtype other than torch.float64/float32 and a skin
that is no length ≥ 0."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from _deploy_models import hco_neighbor_sum, write_model_dir
from ase import Atoms
from ase.build import bulk

from dparallel.ase import Calculator
from dparallel.errors import ConfigError, InvalidStructureError
from dparallel.train.export import export_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    path = write_model_dir(tmp_path_factory.mktemp("calculator_inputs"), hco_neighbor_sum())
    export_model(path, artifacts=False)
    return path


def _periodic() -> Atoms:
    atoms = bulk("Cu", "fcc", a=3.3, cubic=True)
    atoms.set_chemical_symbols(["H", "C", "O", "C"])
    atoms.rattle(0.05, seed=1)
    return atoms


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_position_of_a_molecule_is_refused_naming_the_atom(model_dir, bad) -> None:  # noqa: ANN001
    atoms = Atoms("HCO", positions=[[0, 0, 0], [1.1, 0, 0], [0, 1.2, 0]])
    atoms.positions[2, 1] = bad
    atoms.calc = Calculator(model_dir)
    with pytest.raises(InvalidStructureError, match=rf"atom 2 \(O\) is at \[0.0, {bad}, 0.0\] Å"):
        atoms.get_potential_energy()
    with pytest.raises(InvalidStructureError, match="not a finite position"):
        atoms.get_forces()


def test_a_nan_position_in_md_is_refused_and_finite_ones_work_again(model_dir) -> None:  # noqa: ANN001
    """The MD fast path (same numbers, cell, pbc: only new positions) checks them too."""
    calc = Calculator(model_dir)
    atoms = _periodic()
    atoms.calc = calc
    atoms.get_potential_energy()  # the batch that later steps only refresh
    good = atoms.positions.copy()
    atoms.positions[1] = [np.nan, 0.5, np.nan]
    message = r"Calculator: atom 1 \(C\) is at \[nan, 0.5, nan\] Å, not a finite position"
    with pytest.raises(InvalidStructureError, match=message):
        atoms.get_potential_energy()
    atoms.positions[:] = good
    atoms.positions[0, 0] += 0.01
    fresh = atoms.copy()
    fresh.calc = Calculator(model_dir)
    assert atoms.get_potential_energy() == pytest.approx(fresh.get_potential_energy(), abs=1e-12)
    np.testing.assert_allclose(atoms.get_forces(), fresh.get_forces(), rtol=0, atol=1e-12)


def test_a_non_finite_cell_is_refused_naming_the_vector(model_dir) -> None:  # noqa: ANN001
    atoms = _periodic()
    cell = atoms.cell.array.copy()
    cell[2, 2] = np.inf
    atoms.set_cell(cell)
    atoms.calc = Calculator(model_dir)
    with pytest.raises(InvalidStructureError, match=r"cell vector 2 is \[0.0, 0.0, inf\] Å"):
        atoms.get_potential_energy()


@pytest.mark.parametrize("threads", [0, -2, 1.5, True, "2"])
def test_a_thread_count_below_one_or_not_an_integer_is_refused(model_dir, threads) -> None:  # noqa: ANN001
    message = rf"Calculator: threads={threads!r}; give the number of torch threads per call"
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        Calculator(model_dir, threads=threads)


@pytest.mark.parametrize("dtype", ["float32", torch.int64, np.float32, None])
def test_a_dtype_other_than_torch_float64_or_float32_is_refused(model_dir, dtype) -> None:  # noqa: ANN001
    # dtype="float32" was read as a device: "RuntimeError: Invalid device string: 'float32'"
    message = f"Calculator: dtype={dtype!r}; give torch.float64 (the default) or torch.float32"
    with pytest.raises(ConfigError, match=re.escape(message)):
        Calculator(model_dir, dtype=dtype)


@pytest.mark.parametrize("skin", ["a", -0.5, float("nan"), True])
def test_a_skin_that_is_no_length_is_refused(model_dir, skin) -> None:  # noqa: ANN001
    # skin="a" was a bare "ValueError: could not convert string to float: 'a'"
    with pytest.raises(ConfigError, match=rf"^Calculator: skin={skin!r}; give the neighbour"):
        Calculator(model_dir, skin=skin)


def test_float32_and_a_zero_skin_are_taken(model_dir) -> None:  # noqa: ANN001
    calc = Calculator(model_dir, dtype=torch.float32, skin=0)
    atoms = _periodic()
    atoms.calc = calc
    assert np.isfinite(atoms.get_potential_energy())


def test_integer_thread_counts_and_none_are_taken(model_dir) -> None:  # noqa: ANN001
    assert Calculator(model_dir, threads=np.int64(2)).threads == 2
    assert Calculator(model_dir, threads=None).threads is None


def test_units_other_than_angstrom_ev_are_refused_for_a_dparallel_model(model_dir) -> None:  # noqa: ANN001
    """``units`` names an n2p2 potential directory's units; a dparallel model has none else."""
    for path in (model_dir, model_dir / "deployed.pt"):
        with pytest.raises(
            ConfigError, match=r"Calculator: units: unknown units 'kcal'; expected one of ase, "
        ):
            Calculator(path, units="kcal")
        message = rf"Calculator: {path} is a dparallel model, which works in Å and eV "
        with pytest.raises(ConfigError, match=message + r".*not in units='bohr-hartree'"):
            Calculator(path, units="bohr-hartree")
    atoms = _periodic()
    atoms.calc = Calculator(model_dir)
    reference = atoms.get_potential_energy()
    for units in ("ase", "angstrom-ev"):
        atoms.calc = Calculator(model_dir, units=units)
        assert atoms.get_potential_energy() == reference


def test_an_element_the_model_does_not_know_is_refused_by_symbol(model_dir) -> None:  # noqa: ANN001
    from ase.data import chemical_symbols

    from dparallel.errors import UnknownElementError

    atoms = _periodic()
    atoms.numbers[2] = 29  # the model knows H, C, O
    atoms.calc = Calculator(model_dir)
    message = f"atom 2: atomic number 29 ({chemical_symbols[29]}) is not among"
    with pytest.raises(UnknownElementError, match=re.escape(message)):
        atoms.get_potential_energy()
