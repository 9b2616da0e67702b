"""`dparallel run` as a user runs it: the commands it prints next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest
import yaml

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(400)]


def test_a_workflow_without_training_suggests_a_train_command_that_trains(
    tmp_path: Path,
) -> None:
    # it said `dparallel train STORE -o model/ --set epochs=100`, which train refuses for a
    # store of neighbor sums without dG/dr (training's defaults: ACSF, forces)
    workflow = {
        "name": "sums",
        "dataset": {"path": "cu.extxyz", "generate": {"kind": "emt_cu", "n_structures": 8}},
        "descriptors": {"neighbor_sum": {"elements": ["Cu"], "r_cut": 4.5, "n_sensitivities": 3}},
        "store": {"path": "s.zarr"},
        "cluster": {"n_workers": 1, "dashboard_address": "127.0.0.1:0"},
    }
    (tmp_path / "wf.yaml").write_text(yaml.safe_dump(workflow))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    ran = subprocess.run(
        [sys.executable, "-m", "dparallel", "run", "wf.yaml", "-q"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    suggested = next(l.split() for l in ran.stdout.splitlines() if "dparallel train " in l)
    small = ["--set", "epochs=1", "--set", "hidden=[4]", "-q"]
    trained = subprocess.run(
        [sys.executable, "-m", "dparallel", *suggested[1:], *small],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert trained.returncode == 0, (ran.stdout, trained.stderr)


def _default_sigint() -> None:
    """Ctrl-C as in a terminal, also when the tests run in a background job (which ignores
    SIGINT, and its children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_while_training_says_what_is_kept_and_the_same_command_resumes(
    tmp_path: Path,
) -> None:
    """A terminal's Ctrl-C goes to the whole process group: the command and its local
    cluster (forkserver, workers). One line (no worker traceback), exit code 130, and the
    same command resumes the training from its checkpoint."""
    from dparallel.workflow.spec import QUICKSTART

    argv = [sys.executable, "-m", "dparallel", "run", str(QUICKSTART)]
    for key in ("dataset.generate.n_structures=16", "partitioning.atoms=150",
                "training.epochs=150", "training.hidden=[4]", "cluster.n_workers=1",
                "cluster.dashboard_address=127.0.0.1:0"):  # fmt: skip
        argv += ["--set", key]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    checkpoint = tmp_path / "runs" / "quickstart" / "model" / "checkpoint.pt"
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_default_sigint)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and not checkpoint.exists():
            assert time.monotonic() < deadline, "no epoch finished in 300 s"
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before its first checkpoint was seen"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert errors == [
        "dparallel run: error: interrupted while training runs/quickstart/model; "
        "runs/quickstart/model/checkpoint.pt (the last finished epoch) is kept: rerun the "
        "same command to resume it"
    ], err
    again = subprocess.run([*argv, "-q"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "stages: dataset skipped, featurize skipped, train resumed, export ran" in again.stdout


_SMALL_RUN = ("dataset.generate.n_structures=24", "partitioning.atoms=40", "training.epochs=4",
              "training.hidden=[4]", "cluster.n_workers=1",
              "cluster.dashboard_address=127.0.0.1:0")  # fmt: skip


def _run_argv() -> list[str]:
    from dparallel.workflow.spec import QUICKSTART

    argv = [sys.executable, "-m", "dparallel", "run", str(QUICKSTART), "-q"]
    for key in _SMALL_RUN:
        argv += ["--set", key]
    return argv


def _weights(folder: Path) -> dict:
    import torch

    return torch.load(folder / "runs" / "quickstart" / "model" / "model.pt", weights_only=True)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("uninterrupted")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    subprocess.run(_run_argv(), cwd=folder, env=env, capture_output=True, timeout=300, check=True)
    return folder


def _killed_in(stage: str, folder: Path) -> bool:
    """Whether the run in ``folder`` is in ``stage`` (a partition done / an epoch done)."""
    if stage == "featurize":
        done = folder / "runs" / "quickstart" / "store.zarr" / "partitions" / "done"
        return done.is_dir() and any(p.name.startswith("c.") for p in done.iterdir())
    return (folder / "runs" / "quickstart" / "model" / "checkpoint.pt").exists()


@pytest.mark.parametrize(("stage", "rerun_says"), [
    ("featurize", "featurize ran, train ran, export ran"),
    ("train", "featurize skipped, train resumed, export ran"),
])  # fmt: skip
def test_a_run_killed_outright_in_a_stage_resumes_to_the_uninterrupted_model(
    uninterrupted: Path, tmp_path: Path, stage: str, rerun_says: str
) -> None:
    """SIGKILL to the command and its local cluster (no clean-up at all) mid-stage; the
    same command again: no error, no --overwrite, the stages done are not redone and the
    model is the uninterrupted run's, bit for bit."""
    import torch

    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    proc = subprocess.Popen(_run_argv(), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and not _killed_in(stage, tmp_path):
            assert time.monotonic() < deadline, f"no {stage} progress in 300 s"
            time.sleep(0.02)
        assert proc.poll() is None, f"the run ended before it was seen in {stage}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    again = subprocess.run(_run_argv(), cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert f"stages: dataset skipped, {rerun_says}" in again.stdout
    ours, theirs = _weights(tmp_path), _weights(uninterrupted)
    for name, value in theirs["state_dict"].items():
        assert torch.equal(ours["state_dict"][name], value), name
