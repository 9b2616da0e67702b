"""load_deployed (evaluate, the ASE calculator) without a deployed model: the message says
whether the path exists and names the model directory itself in the export hint."""

from __future__ import annotations

import pytest

from dparallel.deploy import load_deployed
from dparallel.errors import TrainingError


@pytest.mark.parametrize("given", ["nope", "nope/deployed.pt", "other.pt"])
def test_a_missing_path_is_said_to_be_missing(tmp_path, monkeypatch, given):
    monkeypatch.chdir(tmp_path)
    missing = given.split("/")[0]
    with pytest.raises(TrainingError, match=rf"^{missing} does not exist: give a model direct"):
        load_deployed(given)


@pytest.mark.parametrize("given", ["model", "model/deployed.pt"])
def test_a_trained_folder_without_export_is_named_in_the_hint(tmp_path, monkeypatch, given):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.pt").write_bytes(b"")
    with pytest.raises(TrainingError) as refused:
        load_deployed(given)
    assert str(refused.value) == "model holds no deployed.pt: run `dparallel export model` first"


def test_a_folder_without_any_model_is_not_told_to_export(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainingError, match=r"^empty holds no deployed.pt and no model.pt: is it"):
        load_deployed("empty")


@pytest.mark.parametrize("given", ["train.xyz", "train.xyz/deployed.pt"])
def test_a_structure_file_is_said_to_be_a_file_not_missing(tmp_path, monkeypatch, given):
    # Calculator("train.xyz") looks for train.xyz/deployed.pt: it said "does not exist"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.xyz").write_text("1\n\nH 0 0 0\n")
    with pytest.raises(TrainingError) as refused:
        load_deployed(given)
    assert str(refused.value) == (
        "train.xyz is a file, not a model directory: give the folder that `dparallel train` "
        "wrote (with deployed.pt) or its deployed.pt"
    )


def test_a_training_that_stopped_midway_is_told_to_resume(tmp_path, monkeypatch):
    # evaluate / Calculator on a killed training's folder: resume it, as export says
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(TrainingError) as refused:
        load_deployed("model")
    assert str(refused.value) == (
        "model holds no deployed.pt: its training stopped before the end; finish it with "
        "`dparallel train STORE -o model --resume`, then `dparallel export model`"
    )


def test_an_n2p2_potential_without_scaling_data_is_named_as_one(tmp_path, monkeypatch):
    # Calculator / evaluate on it said "holds no deployed.pt and no model.pt: is it a
    # model directory (the one `dparallel train` … trained into)?"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pot").mkdir()
    (tmp_path / "pot" / "input.nn").write_text("number_of_elements 1\n")
    with pytest.raises(TrainingError) as refused:
        load_deployed("pot")
    assert str(refused.value) == (
        "pot/scaling.data is missing: pot holds an n2p2 input.nn, and an n2p2 potential needs "
        "input.nn, scaling.data and weights.XXX.data"
    )


def test_a_folder_still_being_trained_is_not_told_to_resume(tmp_path, monkeypatch, capsys):
    """While a run trains into the folder (it holds its lease, as ``train`` does), neither
    evaluate / the Calculator nor export says the training stopped: --resume would be
    refused as the folder is busy."""
    from dparallel.cli.main import main
    from dparallel.store import StoreLease

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "checkpoint.pt").write_bytes(b"")
    with StoreLease(tmp_path / "model", command="dparallel train"):
        with pytest.raises(TrainingError) as refused:
            load_deployed("model")
        assert main(["export", "model"]) == 2
    said = [str(refused.value), capsys.readouterr().err]
    for text in said:
        assert "holds no " in text and "yet: it is being trained by dparallel train (pid" in text
        assert "when that run has ended" in text and "--resume" not in text
    assert len(said[1].strip().splitlines()) == 1
    with pytest.raises(TrainingError, match="stopped before the end"):  # the run has ended
        load_deployed("model")

    from dparallel.store import lease_holder

    assert lease_holder(tmp_path / "model") is None
    assert lease_holder("/") is None  # no lease beside the root (export / is no model)
