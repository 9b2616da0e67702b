"""One notion of an n2p2 potential folder (``dparallel.nn.folders``), and every command that
takes a model folder agrees on it: the ASE calculator, ``evaluate``, ``export`` and
``load_deployed``. Each answered by its own files before: a folder with n2p2 files beside a
trained model.pt was an n2p2 potential to the calculator and evaluate but a dparallel
model to export; a missing scaling.data was named one way by evaluate, another by export;
load_deployed said a complete n2p2 potential had no scaling.data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "n2p2"))
from n2p2_helpers import n2p2_potential

from dparallel.cli.main import main
from dparallel.errors import DParallelError, TrainingError
from dparallel.nn.folders import is_n2p2_potential, n2p2_files_missing


def test_the_notion(tmp_path: Path) -> None:
    pot = n2p2_potential(tmp_path / "pot")
    assert is_n2p2_potential(pot) and n2p2_files_missing(pot) is None
    (pot / "scaling.data").unlink()
    assert is_n2p2_potential(pot)  # meant as one: named as an incomplete one
    assert n2p2_files_missing(pot) == (
        f"{pot / 'scaling.data'} is missing: {pot} holds an n2p2 input.nn, and an n2p2 "
        "potential needs input.nn, scaling.data and weights.XXX.data"
    )
    (pot / "model.pt").write_bytes(b"")
    assert not is_n2p2_potential(pot)  # a trained dparallel model with n2p2 files beside
    assert not is_n2p2_potential(pot / "input.nn") and not is_n2p2_potential(tmp_path / "no")


def _evaluate(folder: Path, capsys: pytest.CaptureFixture) -> str:
    assert main(["evaluate", str(folder), str(folder / "none.xyz")]) != 0
    return capsys.readouterr().err


def _calculator(folder: Path) -> str:
    from dparallel.ase import Calculator

    with pytest.raises(DParallelError) as refused:
        Calculator(folder)
    return str(refused.value)


def _export(folder: Path, capsys: pytest.CaptureFixture) -> str:
    assert main(["export", str(folder)]) != 0
    return capsys.readouterr().err


def test_a_missing_scaling_data_is_named_alike_everywhere(tmp_path, capsys) -> None:
    pot = n2p2_potential(tmp_path / "pot")
    (pot / "scaling.data").unlink()
    said = n2p2_files_missing(pot)
    assert said is not None
    assert said in _calculator(pot)
    assert said in _evaluate(pot, capsys)
    assert said in _export(pot, capsys)
    from dparallel.deploy import load_deployed

    with pytest.raises(TrainingError, match="^" + said.replace(".", r"\.") + "$"):
        load_deployed(pot)


def test_n2p2_files_beside_a_trained_model_are_a_dparallel_model_everywhere(
    tmp_path, capsys
) -> None:
    # the calculator and evaluate loaded the n2p2 files, export exported the model.pt
    folder = n2p2_potential(tmp_path / "model")
    (folder / "model.pt").write_bytes(b"not a model")
    hint = f"{folder} holds no deployed.pt: run `dparallel export {folder}` first"
    assert _calculator(folder) == hint
    assert hint in _evaluate(folder, capsys)
    assert f"{folder / 'model.pt'}" in _export(folder, capsys)


def test_load_deployed_names_a_complete_n2p2_potential_as_one(tmp_path) -> None:
    # it said the potential "holds an n2p2 input.nn but no scaling.data"
    from dparallel.deploy import load_deployed

    pot = n2p2_potential(tmp_path / "pot")
    with pytest.raises(TrainingError) as refused:
        load_deployed(pot)
    assert str(refused.value) == (
        f"{pot} is an n2p2 potential, not a deployed dparallel model: load it with "
        "dparallel.n2p2.load_potential, or give the folder to dparallel.ase.Calculator or "
        "`dparallel evaluate`"
    )
