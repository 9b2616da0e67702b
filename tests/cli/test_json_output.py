"""Every command with ``--json`` prints one JSON document on stdout and nothing else
(warnings and progress go to stderr): ``python -m json.tool`` reads what it prints. A
command that gains ``--json`` joins :data:`CASES` (the first test says so)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

import pytest

from dparallel.cli.main import build_parser, main

if TYPE_CHECKING:
    from pathlib import Path

SMALL_TRAINING = ["--set", "epochs=1", "--set", "hidden=[4]", "--set", "test_fraction=0.2"]

#: The quickstart workflow of ``demo``, small.
DEMO_SETTINGS = ("dataset.generate.n_structures=6", "partitioning.atoms=200",
                 "training.epochs=1", "training.hidden=[4]", "training.test_fraction=0.2",
                 "cluster.n_workers=1", "cluster.dashboard_address=:0")  # fmt: skip

#: command → its arguments before ``--json`` (``{d}``: the folder of :func:`made`).
CASES: dict[str, list[str]] = {
    "ingest": ["{d}/cu.xyz", "-o", "{d}/i.zarr"],
    "featurize": [
        "{d}/cu.xyz",
        "-o",
        "{d}/f.zarr",
        "--descriptors",
        "{d}/descriptors.yaml",
        "--local",
        "1",
        "--dashboard-address",
        ":0",
    ],
    "info": ["{d}/s.zarr", "--verify"],
    "validate": ["{d}/workflow.yaml"],
    "train": ["{d}/s.zarr", "-o", "{d}/m2", *SMALL_TRAINING],
    "export": ["{d}/m", "--no-artifacts"],
    "evaluate": ["{d}/m", "{d}/cu.xyz"],
    "run": ["tiny.yaml"],  # in {d}: the workflow's paths are the working directory's
    "demo": [a for setting in DEMO_SETTINGS for a in ("--set", setting)],
}
#: Those that run a workflow (a local cluster, training and export): slow.
WORKFLOWS = ("run", "demo")
TINY_WORKFLOW = """
name: tiny
dataset: {path: cu.xyz}
descriptors:
  acsf: {elements: [Cu], r_cut: 4.0, radial: [[0.5, 0.0], [1.0, 2.5]], narrow: []}
  derivatives: true
store: {path: tiny/store.zarr}
training: {epochs: 1, hidden: [4], test_fraction: 0.2}
output: {model_dir: tiny/model}
cluster: {n_workers: 1, dashboard_address: ":0"}
"""


def _json_commands() -> set[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name
        for name, parser in sub.choices.items()
        if any("--json" in action.option_strings for action in parser._actions)
    }


def test_every_command_with_json_is_checked_here() -> None:
    assert _json_commands() == set(CASES)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A featurized Cu store, a model trained and exported from it, and a workflow."""
    import yaml

    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process
    from dparallel.workflow.spec import QUICKSTART

    d = tmp_path_factory.mktemp("json")
    data = write_emt_cu(d / "cu.xyz", 6, seed=2)
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.5, 0.0), (1.0, 2.5)], narrow=[])
    descriptors = DescriptorSet(acsf=acsf, derivatives=True)
    featurize_in_process(data, d / "s.zarr", descriptors, FeaturizeOptions())
    (d / "descriptors.yaml").write_text(
        "acsf: {elements: [Cu], r_cut: 4.0, radial: [[0.5, 0.0], [1.0, 2.5]], narrow: []}\n"
    )
    assert main(["train", str(d / "s.zarr"), "-o", str(d / "m"), *SMALL_TRAINING, "-q"]) == 0
    assert main(["export", str(d / "m"), "--no-artifacts"]) == 0
    (d / "workflow.yaml").write_text(yaml.safe_dump(yaml.safe_load(QUICKSTART.read_text())))
    (d / "tiny.yaml").write_text(TINY_WORKFLOW)
    return d


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=pytest.mark.slow) if c in WORKFLOWS else c for c in sorted(CASES)],
)
def test_json_is_all_that_stdout_holds(command: str, made: Path, capsys, monkeypatch) -> None:
    capsys.readouterr()  # the fixture's own output
    monkeypatch.chdir(made)
    argv = [a.format(d=made) for a in CASES[command]]
    assert main([command, *argv, "--json"]) == 0
    out = capsys.readouterr().out
    document = json.loads(out)  # the whole of stdout: one document, nothing around it
    assert isinstance(document, dict) and document
    if command in WORKFLOWS:  # the errors its model directory records, as train --json
        recorded = json.loads((made / document["model_dir"] / "metrics.json").read_text())
        assert document["final"] == recorded["final"] and document["final"]["test"]
        assert document["stages"]["export"] == "ran"


def test_train_json_gives_the_final_errors_metrics_json_records(made: Path, capsys) -> None:
    capsys.readouterr()
    argv = [a.format(d=made) for a in CASES["train"]]
    assert main(["train", *argv, "--json", "-q"]) == 0
    document = json.loads(capsys.readouterr().out)
    recorded = json.loads((made / "m2" / "metrics.json").read_text())
    assert document["final"] == recorded["final"] and document["final"]["test"]
    assert document["best_epoch"] == recorded["best_epoch"]
    assert document["model"] == str(made / "m2" / "model.pt")


def test_ingest_json_counts_what_ase_reads(made: Path, capsys) -> None:
    from ase.io import read

    capsys.readouterr()
    assert main(["ingest", str(made / "cu.xyz"), "-o", str(made / "i2.zarr"), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    frames = read(made / "cu.xyz", ":")
    assert document["n_structures"] == len(frames)
    assert document["n_atoms"] == sum(len(a) for a in frames)
    assert document["partitions_written"] == document["n_partitions"] >= 1
    assert document["partitions_already_done"] == 0 and document["n_skipped"] == 0
