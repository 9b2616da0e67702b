"""Unit systems: one table, one check, one message, whichever module takes the name."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest
from ase import units as ase_units

from dparallel.errors import ConfigError, DescriptorError, InputError
from dparallel.io.units import UNIT_SYSTEMS, check_units, same_units, unit_factors

ROOT = Path(__file__).resolve().parents[2]
MESSAGE = r"unknown units 'kcal'; expected one of ase, angstrom-ev, bohr-hartree"


def test_factors_are_ases_codata() -> None:
    assert unit_factors("ase") == unit_factors("angstrom-ev") == (1.0, 1.0)
    assert unit_factors("bohr-hartree") == (ase_units.Bohr, ase_units.Hartree)
    assert unit_factors("bohr-hartree") == pytest.approx((0.52917721, 27.2113862), rel=1e-7)


def test_same_units_knows_the_alias() -> None:
    assert same_units("ase", "angstrom-ev") and same_units("angstrom-ev", "ase")
    assert not same_units("ase", "bohr-hartree")
    assert same_units("kcal", "kcal") and not same_units("kcal", "ase")


@pytest.mark.parametrize("error", [ConfigError, InputError, DescriptorError, ValueError])
def test_check_units_raises_the_callers_class(error: type[Exception]) -> None:
    assert check_units("bohr-hartree", "x") == "bohr-hartree"
    with pytest.raises(error, match=rf"^where: {MESSAGE}$"):
        check_units("kcal", "where", error)


def _source(tmp_path: Path) -> None:
    from dparallel.io import open_source

    path = tmp_path / "a.extxyz"
    path.write_text(
        '1\nLattice="5 0 0 0 5 0 0 0 5" Properties=species:S:1:pos:R:3 pbc="T T T"\nCu 0 0 0\n'
    )
    open_source(path, units="kcal")


def _length_unit(tmp_path: Path) -> None:
    from dparallel.descriptors.acsf import length_unit

    length_unit("kcal")


def _acsf_spec(tmp_path: Path) -> None:
    from dparallel.descriptors.acsf_spec import ACSFSpec

    ACSFSpec(n2p2="input.nn", units="kcal")


def _n2p2(tmp_path: Path) -> None:
    from dparallel.n2p2.input_data import write_input_data

    write_input_data(tmp_path / "input.data", [], units="kcal")


def _workflow(tmp_path: Path) -> None:
    from dparallel.workflow.spec import DatasetSpec

    DatasetSpec(path="a.extxyz", units="kcal")


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (_source, InputError),
        (_length_unit, DescriptorError),
        (_acsf_spec, ValueError),
        (_n2p2, ConfigError),
        (_workflow, ValueError),
    ],
)
def test_every_caller_gives_the_one_message(tmp_path: Path, call, error) -> None:  # noqa: ANN001
    with pytest.raises(error, match=MESSAGE):
        call(tmp_path)


def test_evaluate_takes_the_alias_for_the_recorded_units(monkeypatch, caplog) -> None:  # noqa: ANN001
    from dparallel.cli.evaluate import _data_units

    monkeypatch.setattr("dparallel.train.data_units.recorded_data_units", lambda _: "ase")
    with caplog.at_level(logging.WARNING):
        assert _data_units("model", "data.xyz", None, "angstrom-ev") == "angstrom-ev"
    assert "--units" not in caplog.text
    with caplog.at_level(logging.WARNING):
        assert _data_units("model", "data.xyz", None, "bohr-hartree") == "bohr-hartree"
    assert "--units" in caplog.text


def test_no_module_but_io_units_spells_a_unit_system() -> None:
    """The names (and so the alias) are written once: other modules ask io/units.py."""
    for path in (ROOT / "dparallel").rglob("*.py"):
        if path.relative_to(ROOT).as_posix() == "dparallel/io/units.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in UNIT_SYSTEMS[1:]:
                pytest.fail(f"{path}:{node.lineno} spells the unit system {node.value!r}")
