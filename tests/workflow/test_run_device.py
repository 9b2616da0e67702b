"""A workflow's trained model stays current when only where it trained changes."""

from __future__ import annotations

import json
from pathlib import Path

from dparallel.workflow.run import _model_current
from dparallel.workflow.spec import load_workflow

QUICKSTART = Path(__file__).parents[2] / "workflows" / "quickstart.yaml"


def test_device_and_data_on_device_do_not_make_a_model_stale(tmp_path) -> None:  # noqa: ANN001
    spec = load_workflow(QUICKSTART, ["training.device=cpu"])
    assert spec.training is not None
    saved = {**spec.training.to_dict(), "device": "cuda:1", "data_on_device": True}
    (tmp_path / "spec.json").write_text(json.dumps(saved))
    (tmp_path / "metrics.json").write_text(json.dumps({"final": {}}))
    (tmp_path / "model.pt").write_bytes(b"")
    assert _model_current(tmp_path, spec)
    # an older spec.json without the keys is current too; another epoch count is not
    old = {k: v for k, v in saved.items() if k not in ("device", "data_on_device")}
    (tmp_path / "spec.json").write_text(json.dumps(old))
    assert _model_current(tmp_path, spec)
    (tmp_path / "spec.json").write_text(json.dumps({**saved, "epochs": saved["epochs"] + 1}))
    assert not _model_current(tmp_path, spec)
