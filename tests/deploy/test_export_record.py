"""``export.json`` is the export's completion record: a killed export leaves none, the
files of the previous export stay in place until replaced, and ``dparallel run`` exports
again until a complete record of the current ``model.pt`` lists files that all exist.

The plain-torch routes (half a minute of tracing) are replaced by a writer of small files
here; tests/deploy/test_artifacts.py exercises the real ones.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from _deploy_models import hco_neighbor_sum, write_model_dir

import dparallel.train.export as export
from dparallel._files import write_file
from dparallel.deploy.artifacts import ARTIFACTS, RouteReport
from dparallel.workflow.run import WorkflowResult, _finish_model


class _Killed(BaseException):
    """What a SIGKILL, an OOM kill or a lost node does to an export: it stops, mid-step."""


def _artifacts_writer(tag: str):  # noqa: ANN202
    """A stand-in for ``write_artifacts``: ``potential.pt2``/``.ts`` holding ``tag``."""

    def write(potential, model_dir: Path, probes, aoti, reference, float64):  # noqa: ANN001, ANN202
        for name in ("potential.pt2", "potential.ts"):
            write_file(model_dir / name, tag)
        diffs = dict.fromkeys(("energy", "forces", "stress", "energies"), 0.0)
        return {
            "torch_export": RouteReport("ok", "potential.pt2", max_abs_diff=diffs),
            "aot_inductor": RouteReport("skipped", reason="not requested (--aoti)"),
            "torchscript": RouteReport("ok", "potential.ts", max_abs_diff=diffs),
        }

    return write


def _killed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    raise _Killed


def _run_export_stage(model_dir: Path, train: str | None = None) -> tuple[str, list[str]]:
    """What ``dparallel run`` does after training: export unless current; stage, lines said
    (``train``: that stage's outcome in this run, if it had one)."""
    spec = SimpleNamespace(output=SimpleNamespace(export=True), training=object())
    result = WorkflowResult(dataset=Path("d"), store=Path("s"), model_dir=model_dir)
    if train is not None:
        result.stages["train"] = train
    said: list[str] = []
    _finish_model(spec, model_dir, result, said.append)  # type: ignore[arg-type]
    return result.stages["export"], said


def test_a_killed_export_is_redone_by_run_and_never_leaves_the_folder_without_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = write_model_dir(tmp_path / "m", hco_neighbor_sum())
    monkeypatch.setattr(export, "write_artifacts", _artifacts_writer("first"))
    export.export_model(model_dir)
    assert export.export_needed(model_dir) is None
    assert _run_export_stage(model_dir)[0] == "skipped"

    # training went on: a new model.pt, and its export is killed after deployed.pt
    write_model_dir(model_dir, hco_neighbor_sum(), seed=1)
    assert "model.pt changed" in str(export.export_needed(model_dir))
    monkeypatch.setattr(export, "write_artifacts", _killed)
    with pytest.raises(_Killed):
        export.export_model(model_dir)
    assert not (model_dir / "export.json").exists()  # no record claims the export finished
    assert "no export.json" in str(export.export_needed(model_dir))
    # the previous export's files were not removed ahead of their replacements
    assert (model_dir / "potential.pt2").read_text() == "first"
    assert (model_dir / "potential.ts").read_text() == "first"

    monkeypatch.setattr(export, "write_artifacts", _artifacts_writer("second"))
    stage, said = _run_export_stage(model_dir)
    assert stage == "ran"
    assert said[0] == (
        f"export: {model_dir} (no export.json: never exported, or an export did not finish)"
    )
    report = json.loads((model_dir / "export.json").read_text())
    digest = hashlib.sha256((model_dir / "model.pt").read_bytes()).hexdigest()
    assert report["model_sha256"] == digest
    assert {"deployed.pt", "potential.pt2", "potential.ts"} <= set(report["files"])
    assert all((model_dir / f).is_file() for f in report["files"])
    assert (model_dir / "potential.pt2").read_text() == "second"
    assert _run_export_stage(model_dir)[0] == "skipped"


def test_a_record_whose_files_are_gone_or_that_is_older_than_the_model_is_not_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = write_model_dir(tmp_path / "m", hco_neighbor_sum())
    monkeypatch.setattr(export, "write_artifacts", _artifacts_writer("first"))
    export.export_model(model_dir)
    (model_dir / "potential.ts").unlink()
    assert export.export_needed(model_dir) == (
        f"export.json lists potential.ts, not in {model_dir}"
    )
    export.export_model(model_dir)
    assert export.export_needed(model_dir) is None
    # a record of an older dparallel (no model_sha256): current while not older than model.pt
    record = model_dir / "export.json"
    report = json.loads(record.read_text())
    del report["model_sha256"]
    record.write_text(json.dumps(report))
    assert export.export_needed(model_dir) is None
    model_time = (model_dir / "model.pt").stat().st_mtime
    os.utime(record, (model_time - 10, model_time - 10))
    assert export.export_needed(model_dir) == "model.pt is newer than export.json"
    record.write_text("{")
    assert "is unreadable (JSONDecodeError" in str(export.export_needed(model_dir))


def test_files_of_routes_not_written_again_are_removed_after_the_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A route this export skips or fails leaves no older model's file; other elements'
    networks of an older model are removed too."""
    model_dir = write_model_dir(tmp_path / "m", hco_neighbor_sum())
    monkeypatch.setattr(export, "write_artifacts", _artifacts_writer("first"))
    (model_dir / ARTIFACTS["aot_inductor"]).write_text("an older model's")
    (model_dir / "atomic_energy_Cu.pt2").write_text("an older model's")
    report = export.export_model(model_dir)
    assert not (model_dir / ARTIFACTS["aot_inductor"]).exists()
    assert not (model_dir / "atomic_energy_Cu.pt2").exists()
    assert sorted(p.name for p in model_dir.glob("atomic_energy_*.pt2")) == [
        "atomic_energy_C.pt2", "atomic_energy_H.pt2", "atomic_energy_O.pt2"
    ]  # fmt: skip
    export.export_model(model_dir, artifacts=False)
    assert not (model_dir / "potential.pt2").exists() and not (model_dir / "potential.ts").exists()
    assert "potential.pt2" in report["files"]


def test_the_model_digest_is_written_and_checked_by_one_function(tmp_path: Path) -> None:
    """deployed.pt's and export.json's ``model_sha256`` and both checks of it use
    ``deploy.deployed.model_sha256`` (export had its own copy)."""
    import torch

    from dparallel.deploy import deployed

    assert export.model_sha256 is deployed.model_sha256
    model_dir = write_model_dir(tmp_path / "m", hco_neighbor_sum())
    report = export.export_model(model_dir, artifacts=False)
    want = hashlib.sha256((model_dir / "model.pt").read_bytes()).hexdigest()
    assert report["model_sha256"] == want
    assert torch.load(model_dir / "deployed.pt", weights_only=False)["model_sha256"] == want


def test_a_model_file_given_for_its_folder_is_refused_naming_the_folder(tmp_path: Path) -> None:
    # `dparallel export model/model.pt` said "Not a directory: model/model.pt/export.json"
    model_file = tmp_path / "model" / "model.pt"
    model_file.parent.mkdir()
    model_file.write_bytes(b"x")
    with pytest.raises(export.TrainingError) as refused:
        export.export_model(model_file)
    assert str(refused.value) == (
        f"{model_file} is a file, not a model directory: give the folder that `dparallel "
        f"train` wrote ({model_file.parent})"
    )
    assert model_file.read_bytes() == b"x"


@pytest.mark.parametrize("train", ["ran", "resumed"])
def test_a_model_trained_in_the_run_is_exported_without_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, train: str
) -> None:
    """Just trained, a model has no export yet: the run says it exports, not why (the
    reason, "never exported, or an export did not finish", read like a fault)."""
    model_dir = write_model_dir(tmp_path / "m", hco_neighbor_sum())
    monkeypatch.setattr(export, "write_artifacts", _artifacts_writer("first"))
    stage, said = _run_export_stage(model_dir, train)
    assert stage == "ran" and said[0] == f"export: {model_dir}"


def test_the_runs_file_list_leaves_out_hidden_files(tmp_path: Path) -> None:
    """The model folder's marker (``.dparallel-model.json``) is no file for the user: the
    run's list of what it wrote does not show it."""
    from dparallel.train.model_dir import MARKER

    model_dir = write_model_dir(tmp_path / "m", hco_neighbor_sum())
    (model_dir / MARKER).write_text("{}")
    (model_dir / "metrics.json").write_text("{}")
    spec = SimpleNamespace(output=SimpleNamespace(export=False), training=object())
    result = WorkflowResult(dataset=Path("d"), store=Path("s"), model_dir=model_dir)
    _finish_model(spec, model_dir, result, print)  # type: ignore[arg-type]
    assert "metrics.json" in result.files and MARKER not in result.files
