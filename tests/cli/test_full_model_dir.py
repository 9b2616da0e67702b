"""A model directory on a real full disk (a tmpfs filled to its last byte): ``train`` and
``export`` end in one line, leave no file torn or half-written, and the command the line
names finishes once there is room. Needs root to mount the tmpfs (skipped otherwise)."""

from __future__ import annotations

import pytest
from hco import featurized_hco

from dparallel.cli.main import main
from dparallel.nn import load_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = ["--set", "hidden=[4]", "--set", "batch_size=4", "-q"]


def _one_line(capsys) -> str:  # noqa: ANN001
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_train_and_export_into_a_full_disk_keep_every_finished_file(tmp_path, tmpfs, capsys):
    store = featurized_hco(tmp_path)
    disk = tmpfs("4m")
    model = disk / "m"
    argv = ["train", str(store), "-o", str(model), *SMALL]
    assert main([*argv, "--set", "epochs=1"]) == 0
    kept = (model / "checkpoint.pt").read_bytes()

    tmpfs.fill(disk)  # the next checkpoint cannot be written
    assert main([*argv, "--set", "epochs=3", "--resume"]) == 2
    err = _one_line(capsys)
    assert "no space left on the device" in err and "rerun with --resume" in err, err
    assert (model / "checkpoint.pt").read_bytes() == kept  # the last finished epoch's
    assert not list(model.glob("*.partial")) and load_model(model / "model.pt") is not None
    (disk / "filler").unlink()
    assert main([*argv, "--set", "epochs=3", "--resume"]) == 0
    assert main(["export", str(model)]) == 0
    deployed = (model / "deployed.pt").read_bytes()
    capsys.readouterr()

    tmpfs.fill(disk)  # an export again, of the same model: nothing of the first is lost
    assert main(["export", str(model)]) == 2
    assert "no space left on the device" in _one_line(capsys)
    assert not list(model.glob("*.partial")) and not list(model.glob(".*.partial*"))
    assert (model / "deployed.pt").read_bytes() == deployed
    assert main(["evaluate", str(model), str(tmp_path / "data.xyz")]) == 0
    (disk / "filler").unlink()
    assert main(["export", str(model)]) == 0 and (model / "export.json").is_file()
