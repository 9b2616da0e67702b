"""A model directory is ours or refused, one run at a time, one store per model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest
from _store_fixture import small_store

from dparallel.errors import StoreBusyError, TrainingError, UnsafePathError
from dparallel.train import TrainingSpec, train
from dparallel.train.model_dir import MARKER

if TYPE_CHECKING:
    from pathlib import Path

SPEC = TrainingSpec(epochs=2, hidden=(4,), batch_size=4, seed=1, shuffle_buffer=4)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return small_store(tmp_path_factory.mktemp("md"), n=12)


def test_a_folder_of_the_users_is_refused_untouched(store, tmp_path: Path) -> None:
    (tmp_path / "metrics.csv").write_text("the user's numbers\n")
    with pytest.raises(UnsafePathError, match=r"did not write \(metrics.csv\)"):
        train(store, tmp_path, SPEC)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv"]
    assert (tmp_path / "metrics.csv").read_text() == "the user's numbers\n"


def test_a_model_dir_inside_the_store_is_refused(store) -> None:
    with pytest.raises(UnsafePathError, match="lies inside"):
        train(store, store.path / "model", SPEC)


def test_a_second_run_into_the_same_folder_is_refused(store, tmp_path: Path) -> None:
    """Another process trains into the folder (holds its lease): this run is refused."""
    model = tmp_path / "m"
    model.mkdir()
    done = tmp_path / "release"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, pathlib\n"
            "from dparallel.store import StoreLease\n"
            "with StoreLease(sys.argv[1], command='dparallel train (the first)'):\n"
            "    deadline = time.time() + 120\n"
            "    while not pathlib.Path(sys.argv[2]).exists() and time.time() < deadline:\n"
            "        time.sleep(0.05)\n",
            str(model),
            str(done),
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        lock = tmp_path / "m.lock"
        deadline = time.time() + 120
        while time.time() < deadline and not (lock.exists() and lock.stat().st_size):
            time.sleep(0.05)
        with pytest.raises(StoreBusyError, match=r"dparallel train \(the first\)"):
            train(store, model, SPEC)
    finally:
        done.touch()
        holder.wait(timeout=120)
    assert list(model.iterdir()) == [model / MARKER]  # nothing of a model written


def test_retraining_replaces_every_file_of_the_old_model(store, tmp_path: Path) -> None:
    model = tmp_path / "m"
    train(store, model, SPEC)
    for name in ("deployed.pt", "potential.pt2", "potential.ts", "atomic_energy_Au.pt2"):
        (model / name).write_bytes(b"an older model's")
    (model / "n2p2").mkdir()
    (model / "n2p2" / "input.nn").write_text("old")
    train(store, model, SPEC)
    names = {p.name for p in model.iterdir()}
    assert not names & {"deployed.pt", "potential.pt2", "potential.ts", "atomic_energy_Au.pt2"}
    assert "n2p2" not in names and {"model.pt", "checkpoint.pt", MARKER} <= names
    doc = json.loads((model / MARKER).read_text())
    assert doc["store"]["identity"]["identity"] == store.attrs["identity"]


def test_retraining_removes_every_file_that_export_wrote(store, tmp_path: Path) -> None:
    """What ``export`` actually writes (not a list of names): none of it survives training
    anew, so no exported file (``lammps.model`` for ``pair_style dparallel``) describes
    the old model beside the new ``model.pt``."""
    from dparallel.train.export import export_model

    model = tmp_path / "m"
    train(store, model, SPEC)
    before = {p.name for p in model.iterdir()}
    export_model(model, artifacts=False)
    exported = {p.name for p in model.iterdir()} - before
    assert {"deployed.pt", "lammps.model"} <= exported
    train(store, model, SPEC)
    assert not exported & {p.name for p in model.iterdir()}


def test_resume_after_the_store_was_made_again_is_refused(store, tmp_path: Path) -> None:
    model = tmp_path / "m"
    train(store, model, SPEC.model_copy(update={"epochs": 1}))
    doc = json.loads((model / MARKER).read_text())
    doc["store"]["identity"]["identity"] = "0" * 32  # as if featurized again since
    (model / MARKER).write_text(json.dumps(doc))
    with pytest.raises(TrainingError, match=r"--resume: .* trained from another store"):
        train(store, model, SPEC, resume=True)


def test_a_store_replaced_during_training_stops_the_run(store, tmp_path: Path) -> None:
    model = tmp_path / "m"
    seen: list[int] = []

    def replace_after_first(row: dict) -> None:
        seen.append(row["epoch"])
        doc = json.loads((model / MARKER).read_text())
        doc["store"]["identity"]["identity"] = "f" * 32  # what the store now is differs
        (model / MARKER).write_text(json.dumps(doc))

    with pytest.raises(TrainingError, match="changed under this run"):
        train(store, model, SPEC.model_copy(update={"epochs": 3}), callback=replace_after_first)
    assert seen == [0]


def test_a_run_failing_before_training_leaves_no_folder(store, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    model = tmp_path / "new-model"
    with pytest.raises(TrainingError):
        train(store, model, SPEC.model_copy(update={"device": "cuda"}))
    assert not model.exists()
    assert not (tmp_path / "new-model.lock").exists()


def test_an_interrupted_first_run_keeps_its_folder_for_resume(store, tmp_path: Path) -> None:
    model = tmp_path / "fresh"

    def stop(row: dict) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(store, model, SPEC, callback=stop)
    assert (model / MARKER).is_file() and (model / "checkpoint.pt").is_file()
    train(store, model, SPEC, resume=True)
    assert (model / "model.pt").is_file()
