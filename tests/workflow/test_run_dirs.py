"""``dparallel run`` never trains over a finished model of another configuration."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from dparallel.workflow.run_dirs import choose_model_dir, record_store

if TYPE_CHECKING:
    from pathlib import Path

SPEC = {"epochs": 300, "seed": 0}
STORE = {"path": "s.zarr", "created": "2026-01-01T00:00:00+00:00"}


def _finished(model_dir: Path, spec: dict, store: dict | None = STORE) -> bytes:
    model_dir.mkdir(parents=True)
    (model_dir / "model.pt").write_bytes(b"weights of a 300-epoch model")
    (model_dir / "metrics.json").write_text(json.dumps({"final": {"test": {}}}))
    (model_dir / "spec.json").write_text(json.dumps(spec))
    if store is not None:
        record_store(model_dir, store)
    return (model_dir / "model.pt").read_bytes()


def test_no_model_or_an_unfinished_one_is_trained_in_place(tmp_path):
    assert choose_model_dir(tmp_path / "model", SPEC, STORE, False).train
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "checkpoint.pt").write_bytes(b"")
    target = choose_model_dir(tmp_path / "model", SPEC, STORE, False)
    assert target.path == tmp_path / "model" and target.train and not target.reason


def test_the_same_configuration_is_reused(tmp_path):
    _finished(tmp_path / "model", SPEC)
    target = choose_model_dir(tmp_path / "model", SPEC, STORE, False)
    assert target.path == tmp_path / "model" and not target.train


def test_a_changed_spec_trains_into_a_new_directory_and_says_so(tmp_path):
    model = tmp_path / "model"
    _finished(model, SPEC)
    changed = {**SPEC, "epochs": 50}
    target = choose_model_dir(model, changed, STORE, False)
    assert target.train and target.path == tmp_path / "model-2"
    assert "is kept" in target.reason and "model-2" in target.reason
    assert "epochs: 300 → 50" in target.reason
    _finished(target.path, changed)
    # rerunning either configuration finds its own model, trains nothing
    assert choose_model_dir(model, changed, STORE, False).path == tmp_path / "model-2"
    assert not choose_model_dir(model, changed, STORE, False).train
    assert choose_model_dir(model, SPEC, STORE, False) == choose_model_dir(model, SPEC, STORE, 0)
    assert choose_model_dir(model, SPEC, STORE, False).path == model
    third = choose_model_dir(model, {**SPEC, "seed": 1}, STORE, False)
    assert third.path == tmp_path / "model-3" and third.train


def test_a_new_store_never_reuses_a_model_of_the_old_one(tmp_path):
    model = tmp_path / "model"
    _finished(model, SPEC)
    target = choose_model_dir(model, SPEC, STORE, True)
    assert target.train and target.path == tmp_path / "model-2"
    _finished(target.path, SPEC, {**STORE, "created": "later"})
    again = choose_model_dir(model, SPEC, {**STORE, "created": "later"}, False)
    assert again.path == tmp_path / "model-2" and not again.train
    assert "earlier store" in again.reason


def test_a_model_without_store_json_counts_as_of_this_store(tmp_path):
    _finished(tmp_path / "model", SPEC, store=None)  # trained before store.json existed
    assert not choose_model_dir(tmp_path / "model", SPEC, STORE, False).train


@pytest.mark.integration
@pytest.mark.slow
def test_run_with_more_epochs_keeps_the_finished_model(tmp_path):
    """The issue's case: `run --set training.epochs=N` after a finished run."""
    from test_run import SMALL, _run

    from dparallel.workflow.spec import QUICKSTART

    first = _run("run", str(QUICKSTART), *SMALL, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    model = tmp_path / "runs" / "quickstart" / "model"
    before = (model / "model.pt").read_bytes()
    assert json.loads((model / "data_units.json").read_text())["data_units"] == "ase"
    second = _run("run", str(QUICKSTART), *SMALL, "--set", "training.epochs=3", cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert (model / "model.pt").read_bytes() == before
    assert "note: " in second.stdout and "it is kept, this run trains into" in second.stdout
    assert "model_dir: runs/quickstart/model-2" in second.stdout
    assert "dparallel evaluate runs/quickstart/model-2" in second.stdout


@pytest.mark.parametrize(
    "key", ["device", "data_on_device", "batch_prefetch", "prefetch", "threads"]
)
def test_keys_of_how_fast_it_trains_reuse_the_finished_model(tmp_path, key):
    """They change where or how fast a model trains, not what it learns (the checkpoint
    resumes across them too: dparallel.train.checkpoints._RESUMABLE_KEYS)."""
    _finished(tmp_path / "model", {**SPEC, key: 1})
    target = choose_model_dir(tmp_path / "model", {**SPEC, key: 2}, STORE, False)
    assert target.path == tmp_path / "model" and not target.train
