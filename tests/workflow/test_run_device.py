"""A workflow's trained model stays current when only where it trained changes."""

from __future__ import annotations

import json
from pathlib import Path

from dparallel.train.model_dir import MARKER
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
    store = {"identity": "0123456789abcdef0123456789abcdef", "created": "2026-01-01T00:00:00"}
    (model / MARKER).write_text(json.dumps({"store": {"location": "s.zarr", "identity": store}}))

    def reused() -> bool:
        target = choose_model_dir(model, training, store, refeaturized=False)
        return target.path == model and not target.train

    assert reused()
    # an older spec.json without the keys is current too; another epoch count is not
    old = {k: v for k, v in saved.items() if k not in ("device", "data_on_device")}
    (model / "spec.json").write_text(json.dumps(old))
    assert reused()
    (model / "spec.json").write_text(json.dumps({**saved, "epochs": saved["epochs"] + 1}))
    assert not reused()
