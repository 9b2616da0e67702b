"""A workflow that fine-tunes a model (``training.init_from``): without a ``descriptors``
section it featurizes with the model's descriptors (compared with the section the model
was made with, as a user wrote it); other descriptors are refused before featurizing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dparallel.datasets import write_emt_cu
from dparallel.errors import ConfigError
from dparallel.train import TrainingSpec
from dparallel.train import train as train_model
from dparallel.workflow.descriptors_spec import DescriptorsSpec
from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process
from dparallel.workflow.spec import load_quickstart, parse_workflow

#: The descriptors the source model was made with, as a workflow's section.
SECTION = {
    "acsf": {
        "elements": ["Cu"],
        "r_cut": 4.0,
        "radial": [[0.05, 0.0], [2.0, 3.0]],
        "narrow": [[0.01, 1.0, -1.0, 0.0]],
    },
    "derivatives": True,
}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small model trained (1 epoch) on a store of :data:`SECTION`'s descriptors."""
    root = tmp_path_factory.mktemp("source")
    data = write_emt_cu(root / "a.xyz", 6, seed=3)
    descriptors = DescriptorsSpec.model_validate(SECTION).build()
    store = featurize_in_process(data, root / "a.zarr", descriptors, FeaturizeOptions())
    spec = TrainingSpec(epochs=1, hidden=(4,), batch_size=4, validation_fraction=0.0)
    train_model(store, root / "model", spec)
    return root / "model"


def _tuning(source: Path, descriptors: object = None) -> list[str]:
    """The quickstart from ``source`` (its hidden layers), with ``descriptors``."""
    return [f"descriptors={json.dumps(descriptors)}", "training.hidden=[4]",
            f"training.init_from={source}"]  # fmt: skip


def test_without_descriptors_the_model_s_are_featurized(source: Path) -> None:
    spec = load_quickstart(_tuning(source))
    ours = spec.descriptor_set()
    theirs = DescriptorsSpec.model_validate(SECTION).build()
    assert ours.to_dict() == theirs.to_dict()
    assert ours.derivatives  # forces are trained on


def test_featurize_workflow_takes_the_model_s_too(source: Path, tmp_path: Path) -> None:
    """``featurize --workflow`` and ``train --descriptors`` read such a workflow as ``run``;
    ``featurize --descriptors`` points at ``--workflow`` (it listed every section)."""
    from dparallel.workflow.descriptors_spec import load_descriptors

    path = tmp_path / "tune.yaml"
    workflow = {"dataset": {"path": "x.extxyz"}, "training": {"init_from": str(source)}}
    path.write_text(json.dumps(workflow))
    theirs = DescriptorsSpec.model_validate(SECTION).build().to_dict()
    assert load_descriptors(path, section="descriptors").to_dict() == theirs
    assert load_descriptors(path, workflows=True).to_dict() == theirs
    with pytest.raises(ConfigError, match=r"a workflow file .*: pass it with --workflow$"):
        load_descriptors(path)


def test_without_descriptors_or_a_model_is_refused() -> None:
    data = {"dataset": {"path": "x.extxyz"}, "store": {"path": "s.zarr"}}
    with pytest.raises(ConfigError, match=r"no descriptors section: give one, or training"):
        parse_workflow(data)


def test_other_descriptors_are_refused_before_featurizing(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _refused_before_any_work(
        _tuning(source, {**SECTION, "acsf": {**SECTION["acsf"], "r_cut": 4.5}}),
        r"^descriptors.acsf are not those of .*model.pt \(training.init_from: "
        r"features.Cu\[0\].rc: 4.0 → 4.5; .*\): remove the descriptors section",
    )


def _refused_before_any_work(overrides: list[str], match: str) -> None:
    """The quickstart with ``overrides`` is refused by ``check`` (``validate``, ``run``
    before its first stage); nothing made in the working directory."""
    with pytest.raises(ConfigError, match=match):
        load_quickstart(overrides).check()
    assert not Path("data").exists() and not Path("runs").exists()


def test_a_whole_list_that_differs_is_said_by_its_length(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other functions (not one parameter of each): a line, not every function's repr."""
    monkeypatch.chdir(tmp_path)
    fewer = {**SECTION, "acsf": {**SECTION["acsf"], "narrow": []}}
    spec = load_quickstart(_tuning(source, fewer))
    with pytest.raises(ConfigError, match=r"features.Cu: \[3 entries\] → \[2 entries\]\)") as err:
        spec.check()
    assert len(str(err.value)) < 300


def test_other_architecture_keys_are_refused_before_featurizing(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quickstart's hidden: [48, 48] with a model of [4]: run featurized, then training
    refused; ``--set training.hidden=null`` (the refusal says it) runs."""
    monkeypatch.chdir(tmp_path)
    _refused_before_any_work(
        [*_tuning(source), "training.hidden=[48, 48]"],
        r"^training.init_from: .*model.pt: its model's hidden is \[4\], the spec sets "
        r"\[48, 48\]: drop hidden \(or --set training.hidden=null;",
    )
    load_quickstart([*_tuning(source), "training.hidden=null"]).check()


@pytest.mark.slow
@pytest.mark.integration
def test_a_fine_tuning_workflow_runs_without_descriptors(source: Path, tmp_path: Path) -> None:
    """``dparallel run`` of dataset, store, ``training: {init_from}`` and output alone."""
    import os
    import subprocess
    import sys

    import yaml

    workflow = {
        "dataset": {"path": "new.extxyz", "generate": {"n_structures": 6, "seed": 1}},
        "store": {"path": "new.zarr"},
        "cluster": {"n_workers": 1, "dashboard_address": "127.0.0.1:0"},
        "training": {"init_from": str(source), "epochs": 1, "validation_fraction": 0.0},
        "output": {"model_dir": "tuned", "export": False},
    }
    (tmp_path / "tune.yaml").write_text(yaml.safe_dump(workflow))
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", "dparallel", "run", "tune.yaml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "featurize ran, train ran" in done.stdout
    assert (tmp_path / "tuned" / "model.pt").is_file()


def test_continuing_from_the_last_model_is_left_to_run(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """output.model_dir is the finished model init_from names: run keeps it and trains
    beside it (model-2), so validate does not refuse it as a folder the run reads."""
    monkeypatch.chdir(tmp_path)
    load_quickstart([*_tuning(source), f"output.model_dir={source}"]).check(protect=[])
