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


def test_local_wins_over_a_scheduler_in_the_environment(monkeypatch):
    """The environment's scheduler is the default's replacement, not --local's: with both,
    --local N started nothing local and failed on the environment's address."""
    import argparse

    from dparallel.cli._options import add_cluster_arguments, cluster_kwargs

    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:1")
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    kwargs = cluster_kwargs(parser.parse_args(["--local", "2"]))
    assert kwargs["cluster"].kind == "local" and kwargs["cluster"].n_workers == 2
    from dparallel.cluster.connection import expected_workers

    assert expected_workers(kwargs["cluster"]) == 2  # a local cluster of 2, not "unknown"
