"""Options shared by the sub-commands: numbers out of range and scheduler addresses that
are not addresses are one line of error before anything runs (not a traceback later, nor
silently accepted)."""

from __future__ import annotations

import pytest

from dparallel.cli.main import main


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--torch-threads", "0", "needs at least 1 thread, got 0"),
        ("--torch-threads", "-3", "needs at least 1 thread, got -3"),
        ("--gpus", "-1", "needs at least 0 GPU workers, got -1"),
        ("--local", "0", "needs at least 1 worker, got 0"),
        ("--partition-atoms", "0", "needs at least 1 atom, got 0"),
        ("--partition-atoms", "x", "expected a whole number, got 'x'"),
    ],
)
def test_featurize_numbers_out_of_range_are_one_line(tmp_path, capsys, option, value, says):
    argv = ["featurize", str(tmp_path / "in.xyz"), "-o", str(tmp_path / "s.zarr"), option, value]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: {says}" in err and "Traceback" not in err
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("value", ["0", "-3"])
def test_evaluate_batch_out_of_range_is_one_line(tmp_path, capsys, value):
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path), str(tmp_path / "in.xyz"), "--batch", value])
    assert f"--batch: needs at least 1 structure, got {value}" in capsys.readouterr().err
