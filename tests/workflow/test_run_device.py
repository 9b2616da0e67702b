"""A workflow's trained model stays current when only where it trained changes."""

from __future__ import annotations

import json
from pathlib import Path

from dparallel.workflow.run_dirs import choose_model_dir
from dparallel.workflow.spec import load_workflow

QUICKSTART = Path(__file__).parents[2] / "workflows" / "quickstart.yaml"


def test_device_and_data_on_device_do_not_make_a_model_stale(tmp_path) -> None:  # noqa: ANN001
    spec = load_workflow(QUICKSTART, ["training.device=cpu"])
    assert spec.training is not None
    training = spec.training.to_dict()
    model = tmp_path / "model"
    model.mkdir()
    saved = {**training, "device": "cuda:1", "data_on_device": True}
    (model / "spec.json").write_text(json.dumps(saved))
    (model / "metrics.json").write_text(json.dumps({"final": {}}))
    (model / "model.pt").write_bytes(b"")

    def reused() -> bool:
        target = choose_model_dir(model, training, {}, refeaturized=False)
        return target.path == model and not target.train

    assert reused()
    # an older spec.json without the keys is current too; another epoch count is not
    old = {k: v for k, v in saved.items() if k not in ("device", "data_on_device")}
    (model / "spec.json").write_text(json.dumps(old))
    assert reused()
    (model / "spec.json").write_text(json.dumps({**saved, "epochs": saved["epochs"] + 1}))
    assert not reused()
