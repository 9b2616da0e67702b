"""``dparallel run`` never trains over a finished model of another configuration."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from dparallel.nn.folders import model_fingerprint
from dparallel.train.model_dir import MARKER
from dparallel.workflow.run_dirs import choose_model_dir

if TYPE_CHECKING:
    from pathlib import Path

SPEC = {"epochs": 300, "seed": 0}
STORE = {"identity": "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "created": "2026-01-01T00:00:00+00:00"}


def _model_files(model_dir: Path, spec: dict) -> None:
    """What a finished training run leaves in ``model_dir`` (its marker aside)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "model.pt").write_bytes(b"weights of a 300-epoch model")
    (model_dir / "metrics.json").write_text(json.dumps({"final": {"test": {}}}))
    (model_dir / "spec.json").write_text(json.dumps(spec))


def _finished(model_dir: Path, spec: dict, store: dict | None = STORE) -> None:
    """A finished model in ``model_dir``; its marker records ``store`` as training does."""
    _model_files(model_dir, spec)
    marker: dict = {"kind": "model"}
    if store is not None:
        marker["store"] = {"location": "s.zarr", "identity": store}
    (model_dir / MARKER).write_text(json.dumps(marker))


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
    target = choose_model_dir(model, SPEC, None, True)
    assert target.train and target.path == tmp_path / "model-2"
    other = {**STORE, "identity": "a store made again, in the same second"}
    _finished(target.path, SPEC, other)
    again = choose_model_dir(model, SPEC, other, False)
    assert again.path == tmp_path / "model-2" and not again.train
    assert "another store" in again.reason


def test_a_model_that_records_no_store_identity_is_kept_and_trained_beside(tmp_path):
    """Made by an older dparallel (no identity in its marker; ``store.json`` held the path
    and the creation time, to the second, which cannot tell two stores apart)."""
    model = tmp_path / "model"
    _finished(model, SPEC, store=None)
    (model / "store.json").write_text(json.dumps({"path": "s.zarr", "created": STORE["created"]}))
    target = choose_model_dir(model, SPEC, STORE, False)
    assert target.train and target.path == tmp_path / "model-2"
    assert "records no store identity" in target.reason and (model / "model.pt").exists()


def test_a_store_is_known_by_its_identity_not_its_path_or_creation_second(tmp_path):
    """Two stores made at one path within a second are two stores; one store named by
    another spelling of its path is the same (what training records, run compares)."""
    import ase.io
    import numpy as np

    from dparallel.io.location import as_location
    from dparallel.io.synthetic import random_structures
    from dparallel.store import open_store
    from dparallel.train.model_dir import claim_model_dir
    from dparallel.workflow.ingest import IngestOptions, ingest
    from dparallel.workflow.run import _identity

    for i, n in enumerate((6, 7)):
        frames = random_structures(n, np.random.default_rng(i), max_atoms=5)
        ase.io.write(tmp_path / f"d{i}.xyz", frames, format="extxyz")
    ingest(tmp_path / "d0.xyz", tmp_path / "s.zarr", IngestOptions())
    model = tmp_path / "model"
    with claim_model_dir(model, open_store(tmp_path / "s.zarr")):  # records the identity
        _model_files(model, SPEC)
    (tmp_path / "sub").mkdir()
    spelled = as_location(str(tmp_path / "sub" / ".." / "s.zarr"))
    assert not choose_model_dir(model, SPEC, _identity(spelled), False).train
    created = open_store(tmp_path / "s.zarr").attrs["created"]
    ingest(tmp_path / "d1.xyz", tmp_path / "s.zarr", IngestOptions(overwrite=True))
    remade = _identity(as_location(tmp_path / "s.zarr"))
    target = choose_model_dir(model, SPEC, remade, False)
    assert target.train and target.path == tmp_path / "model-2", (created, remade)
    assert "another store" in target.reason


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


def test_a_model_started_from_a_changed_model_is_trained_again(tmp_path):
    """``init_from``: the finished model is reused while the model it started from is the
    one it recorded; once that one is trained again, the run trains into a new folder."""
    source = tmp_path / "source"
    _model_files(source, SPEC)
    model, spec = tmp_path / "model", {**SPEC, "init_from": str(source)}
    _finished(model, spec)
    marker = json.loads((model / MARKER).read_text())
    (model / MARKER).write_text(json.dumps({**marker, "init_from": model_fingerprint(source)}))
    assert choose_model_dir(model, spec, STORE, False) == choose_model_dir(model, spec, STORE, 0)
    assert not choose_model_dir(model, spec, STORE, False).train
    (source / "model.pt").write_bytes(b"weights of the source, trained again")
    target = choose_model_dir(model, spec, STORE, False)
    assert target.train and target.path == tmp_path / "model-2"
    assert f"the model it started from (init_from {source}) changed since" in target.reason
