"""``dparallel run`` end to end on a local cluster: stages, skipping, overrides."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from dparallel.errors import RunInterruptedError
from dparallel.workflow.spec import QUICKSTART

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "--set", "dataset.generate.n_structures=16",
    "--set", "partitioning.atoms=150",
    "--set", "training.epochs=2",
    "--set", "training.hidden=[4]",
    "--set", "cluster.n_workers=1",
    "--set", "cluster.dashboard_address=127.0.0.1:0",
]  # fmt: skip


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "dparallel", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_run_then_rerun_skips_every_finished_stage(tmp_path):
    first = _run("run", str(QUICKSTART), *SMALL, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "stages: dataset ran, featurize ran, train ran, export ran" in first.stdout
    for line in ("validation: energy RMSE", "test: energy RMSE", "scaling.data: ", "model_dir: "):
        assert line in first.stdout
    assert "dashboard: http://127.0.0.1:" in first.stderr
    assert "scaling.data: runs/quickstart/store.scaling.data" in first.stdout
    assert (tmp_path / "runs" / "quickstart" / "store.scaling.data").is_file()
    assert "done in" in first.stdout and "dparallel evaluate runs/quickstart/model" in first.stdout
    model = tmp_path / "runs" / "quickstart" / "model"
    for name in ("model.pt", "deployed.pt", "metrics.csv", "learning_curves.png"):
        assert (model / name).exists(), name
    second = _run("run", str(QUICKSTART), *SMALL, cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "stages: dataset skipped, featurize skipped, train skipped, export skipped" in (
        second.stdout
    )
    # a training section with nowhere to train into: "off", never "skipped" (current)
    nowhere = _run("run", str(QUICKSTART), *SMALL, "--set", "output=null", cwd=tmp_path)
    assert nowhere.returncode == 0, nowhere.stdout + nowhere.stderr
    assert "train off" in nowhere.stdout and "no output.model_dir" in nowhere.stderr
    # a changed training key retrains from the same store
    third = _run("run", str(QUICKSTART), *SMALL, "--set", "training.seed=1", cwd=tmp_path)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "featurize skipped, train ran, export ran" in third.stdout
    # a changed descriptor refuses the existing store unless overwrite is set
    changed = [*SMALL, "--set", "descriptors.acsf.r_cut=4.5"]
    refused = _run("run", str(QUICKSTART), *changed, cwd=tmp_path)
    assert refused.returncode == 2
    assert "another source or config" in refused.stderr
    again = _run("run", str(QUICKSTART), *changed, "--set", "store.overwrite=true", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "featurize ran, train ran" in again.stdout


def test_invalid_workflow_fails_before_any_work(tmp_path):
    bad = _run("run", str(QUICKSTART), "--set", "training.epochz=2", cwd=tmp_path)
    assert bad.returncode == 2
    assert "training.epochz: Extra inputs are not permitted" in bad.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "runs").exists()


def test_a_run_killed_while_training_resumes_its_checkpoint(tmp_path, monkeypatch):
    """The next ``run`` continues the interrupted training from its checkpoint (the epochs
    done are kept, row for row) instead of starting again from epoch 0."""
    from dparallel.workflow.run import run_workflow
    from dparallel.workflow.spec import load_quickstart

    monkeypatch.chdir(tmp_path)
    overrides = [s for s in SMALL if s != "--set"]
    spec = load_quickstart([*overrides, "training.epochs=3"])

    class Killed(Exception):
        pass

    def kill_after_two(row):  # noqa: ANN001, ANN202
        if row["epoch"] == 1:
            raise Killed

    with pytest.raises(Killed):
        run_workflow(spec, on_epoch=kill_after_two)
    metrics = tmp_path / "runs" / "quickstart" / "model" / "metrics.csv"
    before = metrics.read_text().splitlines()
    assert len(before) == 1 + 2  # header, epochs 0 and 1
    seen = []
    result = run_workflow(spec, on_epoch=lambda row: seen.append(row["epoch"]))
    assert result.stages["train"] == "resumed" and seen == [2]
    after = metrics.read_text().splitlines()
    assert after[:3] == before and len(after) == 4  # epochs 0, 1 kept as they were
    assert (result.model_dir / "model.pt").is_file() and result.metrics["test"]


def test_a_killed_training_of_another_configuration_trains_afresh(tmp_path, monkeypatch):
    """Only a checkpoint that cannot be resumed (another training configuration) makes the
    next run start again; the run says so."""
    from dparallel.workflow.run import run_workflow
    from dparallel.workflow.spec import load_quickstart

    monkeypatch.chdir(tmp_path)
    overrides = [s for s in SMALL if s != "--set"]
    spec = load_quickstart([*overrides, "training.epochs=3"])

    def kill_after_one(row):  # noqa: ANN001, ANN202
        raise KeyboardInterrupt

    # Ctrl-C: one error that says what is kept and that the same command resumes it
    checkpoint = Path("runs", "quickstart", "model", "checkpoint.pt")
    kept = f"interrupted while training runs/quickstart/model; {checkpoint} (the last finished"
    with pytest.raises(RunInterruptedError, match=re.escape(kept)) as info:
        run_workflow(spec, on_epoch=kill_after_one)
    assert str(info.value).endswith("is kept: rerun the same command to resume it")

    def interrupted(name: str):  # noqa: ANN202
        raise KeyboardInterrupt  # Ctrl-C while the stage imports (torch: seconds)

    importing = types.ModuleType("dparallel.train.reporting")
    importing.__getattr__ = interrupted  # type: ignore[method-assign]
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "dparallel.train.reporting", importing)
        with pytest.raises(RunInterruptedError, match=re.escape(kept)):
            run_workflow(spec)
    said, seen = [], []
    other = load_quickstart([*overrides, "training.epochs=3", "training.lr=0.002"])
    result = run_workflow(other, say=said.append, on_epoch=lambda row: seen.append(row["epoch"]))
    assert result.stages["train"] == "ran" and seen == [0, 1, 2]
    assert any("is not resumed" in line and "another config" in line for line in said), said


def test_a_ctrl_c_while_the_cluster_closes_names_that_not_featurizing(tmp_path, monkeypatch):
    """A Ctrl-C after the stages, while the run's cluster closes, said "interrupted while
    featurizing" (the message of the whole cluster block); it says what the run did then."""
    import contextlib

    import dparallel.cluster as cluster
    from dparallel.workflow.run import run_workflow
    from dparallel.workflow.spec import load_quickstart

    monkeypatch.chdir(tmp_path)
    spec = load_quickstart([*[s for s in SMALL if s != "--set"], "training.epochs=1"])
    connect = cluster.connect

    @contextlib.contextmanager
    def interrupted_on_closing(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        with connect(*args, **kwargs) as handle:
            yield handle
        if kwargs.get("client") is None:  # the run's own cluster, not featurize's use of it
            raise KeyboardInterrupt

    monkeypatch.setattr(cluster, "connect", interrupted_on_closing)
    with pytest.raises(RunInterruptedError) as info:
        run_workflow(spec)
    assert str(info.value) == (
        "interrupted while closing the cluster; the finished stages are kept: rerun the "
        "same command to go on"
    )
