"""`dparallel train` as a user runs it: the commands it prints next run; its options."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path


def test_the_commands_it_suggests_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # it suggested `export --format n2p2` for a neighbor-sum model, which export refuses
    from dparallel.cli.main import main
    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import NeighborSum
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = write_emt_cu(tmp_path / "cu.xyz", 6, seed=1)
    sums = NeighborSum(["Cu"], 4.0, n_sensitivities=3)
    descriptors = DescriptorSet(neighbor_sum=sums, derivatives=True)
    featurize_in_process(data, tmp_path / "s.zarr", descriptors, FeaturizeOptions())
    monkeypatch.chdir(tmp_path)
    small = ["--set", "epochs=1", "--set", "hidden=[4]", "-q"]
    assert main(["train", "s.zarr", "-o", "m", "--set", "descriptor=neighbor_sum", *small]) == 0
    out = capsys.readouterr().out
    commands = [line.split() for line in out.splitlines() if line.startswith("  dparallel ")]
    assert {"export", "evaluate"} <= {c[1] for c in commands}, out
    for command in commands:
        assert main(command[1:]) == 0, command


def test_the_evaluate_it_suggests_gives_the_test_errors_it_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # it suggested `evaluate MODEL SOURCE`: errors over every structure, the training set's
    # too, beside the test errors it had just printed
    import json

    from dparallel.cli.main import main
    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = write_emt_cu(tmp_path / "cu.xyz", 12, seed=1)
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.05, 0.0), (2.0, 3.0)], narrow=[])
    featurize_in_process(
        data, tmp_path / "s.zarr", DescriptorSet(acsf=acsf, derivatives=True), FeaturizeOptions()
    )
    monkeypatch.chdir(tmp_path)
    small = ["--set", "epochs=1", "--set", "hidden=[4]", "--set", "test_fraction=0.4", "-q"]
    assert main(["train", "s.zarr", "-o", "m", *small]) == 0
    out = capsys.readouterr().out
    commands = [line.split() for line in out.splitlines() if line.startswith("  dparallel ")]
    evaluate = next(c for c in commands if c[1] == "evaluate")
    assert evaluate[-2:] == ["--split", "test"], out
    assert main(["export", "m"]) == 0
    capsys.readouterr()
    assert main([*evaluate[1:], "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    final = json.loads((tmp_path / "m" / "metrics.json").read_text())["final"]["test"]
    for key in ("energy_rmse_meV_per_atom", "force_rmse_meV_per_A"):
        assert got[key] == pytest.approx(final[key], rel=1e-9), key


def test_torch_threads_is_the_training_threads_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # featurize and run took --torch-threads, train only --set threads=N
    import json

    from dparallel.cli.main import main
    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = write_emt_cu(tmp_path / "cu.xyz", 6, seed=1)
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.5, 0.0), (1.0, 2.5)], narrow=[])
    featurize_in_process(data, tmp_path / "s.zarr", DescriptorSet(acsf=acsf, derivatives=True),
                         FeaturizeOptions())  # fmt: skip
    small = ["--set", "epochs=1", "--set", "hidden=[4]", "-q"]
    model = tmp_path / "m"
    assert main(["train", str(tmp_path / "s.zarr"), "-o", str(model), "--torch-threads", "2",
                 *small]) == 0  # fmt: skip
    assert json.loads((model / "spec.json").read_text())["threads"] == 2
    with pytest.raises(SystemExit):
        main(["train", "s.zarr", "-o", "m", "--torch-threads", "-1"])
    assert "--torch-threads: needs at least 0 threads, got -1" in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.slow
def test_a_scheduler_killed_mid_training_is_a_warning_and_the_training_goes_on(
    tmp_path: Path,
) -> None:
    """`train --scheduler` only publishes its epochs there: a scheduler SIGKILLed mid-run
    printed distributed's "dparallel train: error: Failed to reconnect to scheduler …",
    which reads as the end of the run, while the training went on. It is one warning that
    names the scheduler and says the training goes on, and the epochs go on."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from daskprocs import child_env, start_scheduler, stop

    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = write_emt_cu(tmp_path / "cu.xyz", 6, seed=1)
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.5, 0.0), (1.0, 2.5)], narrow=[])
    featurize_in_process(data, tmp_path / "s.zarr", DescriptorSet(acsf=acsf, derivatives=True),
                         FeaturizeOptions())  # fmt: skip
    scheduler, address = start_scheduler(tmp_path)
    metrics, log = tmp_path / "m" / "metrics.csv", tmp_path / "train.log"

    def rows() -> int:
        return len(metrics.read_text().splitlines()) if metrics.exists() else 0

    def wait_for(what, timeout: float) -> None:  # noqa: ANN001 - a predicate
        deadline = time.monotonic() + timeout
        while not what() and time.monotonic() < deadline and train.poll() is None:
            time.sleep(0.1)
        assert what(), log.read_text()[-3000:]

    argv = [sys.executable, "-m", "dparallel", "train", str(tmp_path / "s.zarr"), "-o",
            str(tmp_path / "m"), "--scheduler", address, "--set", "epochs=1000000", "--set",
            "hidden=[4]", "-q"]  # fmt: skip
    with open(log, "wb") as out:
        train = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=child_env(),
                                 start_new_session=True)  # fmt: skip
    try:
        wait_for(lambda: rows() >= 3, 120)
        os.killpg(scheduler.pid, signal.SIGKILL)
        wait_for(lambda: b"lost the Dask scheduler" in log.read_bytes(), 60)  # ~10 s
        then = rows()
        wait_for(lambda: rows() > then + 2, 60)
    finally:
        if train.poll() is None:
            os.killpg(train.pid, signal.SIGTERM)
        train.wait(60)
        stop(scheduler)
    text = log.read_text()
    assert f"dparallel train: warning: lost the Dask scheduler {address}" in text, text
    assert "training goes on" in text and "Failed to reconnect" not in text, text
