"""Workflow files: validation messages, overrides, schema, the shipped examples."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dparallel.cli.main import main
from dparallel.errors import ConfigError
from dparallel.workflow.spec import (
    QUICKSTART,
    apply_overrides,
    load_workflow,
    parse_workflow,
    workflow_schema,
)

ROOT = Path(__file__).resolve().parents[2]


def _quickstart() -> dict:
    return yaml.safe_load(QUICKSTART.read_text())


def test_every_shipped_workflow_validates():
    files = sorted((ROOT / "workflows").glob("*.yaml"))
    assert {f.name for f in files} >= {"quickstart.yaml"}
    for path in files:
        load_workflow(path)
    assert (ROOT / "workflows" / "quickstart.yaml").read_text() == QUICKSTART.read_text()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["training.epochz=3"], "training.epochz: Extra inputs are not permitted"),
        (["cluster.n_workers=many"], "cluster.n_workers: Input should be a valid integer"),
        (
            ["partitioning.atoms=0"],
            "partitioning.atoms: Input should be greater than or equal to 1",
        ),
        (["descriptors.acsf.radial=[[1.0]]"], "descriptors.acsf.radial.0"),
        (
            ["descriptors.acsf=null", "descriptors.neighbor_sum=null"],
            "define 'acsf', 'neighbor_sum'",
        ),
        (["dataset.on_error=ignore"], "dataset.on_error: Input should be 'raise' or 'skip'"),
        (["dataset.energy_key=''"], "dataset.energy_key: String should have at least 1"),
        (["descriptors.acsf={n2p2: ''}"], "descriptors.acsf.n2p2: String should have at least"),
        (
            ["dataset.format=runner", "dataset.forces_key=f", "dataset.generate=null"],
            "dataset: Value error, forces_key cannot be given for format 'runner'",
        ),
    ],
)
def test_invalid_workflows_name_the_key_path(change, message):
    with pytest.raises(ConfigError, match="invalid workflow") as info:
        parse_workflow(_quickstart(), change, source="quick.yaml")
    assert message in str(info.value)
    assert str(info.value).startswith("quick.yaml: ")


def test_missing_section_and_bad_yaml(tmp_path):
    data = _quickstart()
    del data["store"]
    with pytest.raises(ConfigError, match="store: Field required"):
        parse_workflow(data)
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: not valid YAML"):
        load_workflow(bad)
    with pytest.raises(ConfigError, match="workflow file not found"):
        load_workflow(tmp_path / "missing.yaml")


def test_overrides_reach_nested_keys_with_yaml_values():
    spec = parse_workflow(
        _quickstart(),
        ["training.epochs=7", "training.hidden=[8, 4]", "cluster.n_workers=1", "name=x"],
    )
    assert spec.training.epochs == 7 and spec.training.hidden == (8, 4)
    assert spec.cluster.n_workers == 1 and spec.name == "x"
    assert apply_overrides({"a": {"b": 1}}, ["a.c.d=true"]) == {"a": {"b": 1, "c": {"d": True}}}
    with pytest.raises(ConfigError, match=r"expected key.path=value"):
        apply_overrides({}, ["novalue"])
    with pytest.raises(ConfigError, match="'name' is not a section"):
        apply_overrides({"name": "x"}, ["name.first=y"])


def test_schema_and_validate_commands(capsys, tmp_path):
    schema = workflow_schema()
    # descriptors: given, or those of training.init_from (checked by the spec, not the schema)
    assert set(schema["required"]) == {"dataset", "store"}
    assert main(["schema"]) == 0
    assert '"WorkflowSpec"' in capsys.readouterr().out
    assert main(["validate", str(QUICKSTART)]) == 0
    assert main(["validate", str(QUICKSTART), "--set", "training.lr=-1"]) == 2
    assert "training.lr: Input should be greater than 0" in capsys.readouterr().err


def test_n2p2_example_equals_the_quickstart_functions(monkeypatch):
    """The shipped input.nn spells the quickstart set in n2p2 syntax: same features, same values."""
    from dparallel.io import open_source

    monkeypatch.chdir(ROOT)
    n2p2 = load_workflow(ROOT / "workflows" / "n2p2.yaml").descriptors.build().acsf
    quick = load_workflow(QUICKSTART).descriptors.build().acsf
    assert n2p2.order == "n2p2" and quick.order == "given"
    order = quick.n2p2_order("Cu")  # n2p2 sorts the functions; same set, n2p2's order
    assert n2p2.features("Cu") == [quick.features("Cu")[k] for k in order]
    batch = open_source(ROOT / "workflows" / "n2p2" / "input.data", "n2p2").read(0, 3)
    assert list(batch.tags) == ["train", "train", "train"]
    assert (n2p2.compute(batch)["Cu"].values == quick.compute(batch)["Cu"].values[:, order]).all()


def _tuned_cu_acsf(r_cut: float = 5.0):  # noqa: ANN202
    """The tuned ACSF for elemental Cu, from its formulas: 8 radial + 4 angular functions.

    Radial: one wide Gaussian (η = 0.01 Å⁻², rs = 0) and 7 shifted Gaussians with rs
    evenly from 2.0 Å to r_cut − 0.6 Å and η = 1/(2 Δrs²); angular: η = 0.01 Å⁻², rs = 0,
    ζ ∈ {1, 4}, λ = ±1, cosine cutoff (docs/training.md, "EMT Cu accuracy target").
    """
    import numpy as np

    from dparallel.descriptors import ACSF

    shifts = np.linspace(2.0, r_cut - 0.6, 7)
    d = float(shifts[1] - shifts[0])
    radial = [(0.01, 0.0)] + [(1.0 / (2 * d * d), float(rs)) for rs in shifts]
    narrow = [(0.01, z, lam, 0.0) for z in (1.0, 4.0) for lam in (-1.0, 1.0)]
    return ACSF.uniform(["Cu"], r_cut=r_cut, cutoff="cos", radial=radial, narrow=narrow)


def test_quickstart_uses_the_tuned_defaults():
    """The embedded default trains with the settings that reach the EMT Cu target."""
    from dparallel.train import TrainingSpec

    spec = load_workflow(QUICKSTART)
    ours, tuned = spec.descriptors.build().acsf.features("Cu"), _tuned_cu_acsf().features("Cu")
    assert len(ours) == len(tuned)
    for a, b in zip(ours, tuned, strict=True):
        assert a.keys() == b.keys()
        for key, value in a.items():
            if isinstance(value, float):  # the YAML spells the computed values
                assert value == pytest.approx(b[key], rel=1e-12), key
            else:
                assert value == b[key], key
    assert spec.training == TrainingSpec()


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (["traning.epochs=3"], "  traning: Extra inputs are not permitted; did you mean "
         "'training'? (--set traning.epochs=3)"),
        (["training.hiden=[4]"], "; did you mean 'hidden'? (--set training.hiden=[4])"),
        (["descriptors.acsf.r_cutt=4"], "descriptors.acsf.r_cutt: Extra inputs are not "
         "permitted; did you mean 'r_cut'?"),
        (["descriptors.acsf={n2p2: x.nn, unit: ase}"], "acsf.unit: Extra inputs are not "
         "permitted; did you mean 'units'?"),
        (["descriptors.derivative=true"], "descriptors.derivative: unknown descriptor type "
         "'derivative'; registered: 'acsf', 'neighbor_sum'; did you mean 'derivatives'?"),
        (["cluster.slurm.queu=x"], "cluster.slurm.queu: Extra inputs are not permitted; did "
         "you mean 'queue'?"),
        (["dataset.generate.n_structure=3"], "did you mean 'n_structures'?"),
        (["zzz=1"], "  zzz: Extra inputs are not permitted (--set zzz=1)"),  # nothing close
    ],
)  # fmt: skip
def test_a_misspelt_key_gets_the_closest_known_one(change, line):
    """Unknown keys said only "Extra inputs are not permitted" (a misspelt descriptors key
    was an unknown descriptor type), and an unknown section named no --set."""
    with pytest.raises(ConfigError) as info:
        parse_workflow(_quickstart(), change, source="quick.yaml")
    assert line in str(info.value)


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("dataset.units=bohr", "dataset.units: .*unknown units 'bohr'; expected one of"),
        ("dataset.format=xyzz", "dataset.format: .*'xyzz' is neither"),
        ("descriptors.acsf.cutoff=cosine", "descriptors.acsf: unknown cutoff 'cosine'"),
        ("descriptors.acsf.elements=[Cux]", "descriptors.acsf: elements must be"),
        ("descriptors.acsf.radial=[[0.1, 9.0]]", "descriptors.acsf: .*beyond the cutoff"),
        (
            "descriptors.acsf={n2p2: runs}",
            r"^descriptors.acsf: .*runs: a folder, not an n2p2 "
            r"input.nn file",
        ),
        (
            "descriptors.acsf={n2p2: missing.nn}",
            r"^descriptors.acsf: n2p2 input.nn file not "
            r"found: .*missing.nn",
        ),
        (
            "descriptors.neighbor_sum={elements: [Cu], r_cut: 3.0, r_min: 4.0}",
            r"^descriptors.neighbor_sum: need 0 < r_min",
        ),
    ],
)
def test_validate_refuses_what_run_refuses(override, says, tmp_path, monkeypatch):
    """``validate`` said ok to these and ``run`` then refused them: one check for both."""
    from dparallel.errors import ConfigError
    from dparallel.workflow.spec import load_quickstart

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(ConfigError, match=says):
        load_quickstart([override]).check()


def test_a_descriptors_file_that_cannot_be_built_is_named(tmp_path):
    from dparallel.errors import ConfigError
    from dparallel.workflow.descriptors_spec import load_descriptors

    path = tmp_path / "d.yaml"
    path.write_text("acsf: {elements: [Cux], r_cut: 4.0, radial: [[0.5, 0.0]]}\n")
    with pytest.raises(ConfigError, match=rf"^{path}: invalid descriptors: acsf: elements must be"):
        load_descriptors(path)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["dataset.units=bohr-hartree"], r"dataset: .*generate writes an extxyz file in Å and "
         r"eV, but units is 'bohr-hartree'"),
        (["dataset.format=n2p2"], r"dataset: .*generate writes .*but format is 'n2p2'"),
        (["dataset.format=null", "dataset.path=x/input.data"], r"dataset: .*\.data name"),
        (["dataset.format=null", "dataset.path=x/cu.data.xz"], r"dataset: .*\.data name"),
        (["dataset.energy_key=dft_energy"], r"dataset: .*generate writes .*but energy_key/"
         r"forces_key name keys it does not write"),
        (["training.descriptor=neighbor_sum"], r"^training.descriptor is 'neighbor_sum', but "
         r"descriptors has no 'neighbor_sum' section \(given: acsf\): add descriptors"),
        (["descriptors.derivatives=false"], r"^training.force_weight is 0.03 \(training on "
         r"forces\) from stored descriptors, but descriptors.derivatives is false"),
        (["descriptors.derivatives=false", "training.optimizer=kalman"], "derivatives is false"),
        (["output.model_dir=runs/quickstart/store.zarr"], r"^output.model_dir \(runs/quickstart"
         r"/store.zarr\) is store.path \(runs/quickstart/store.zarr\): choose a folder outside"),
        (["output.model_dir=./runs/quickstart/store.zarr/m"], r"is inside store.path"),
    ],
)  # fmt: skip
def test_validate_refuses_sections_that_do_not_fit(overrides, says, tmp_path, monkeypatch):
    """Each was accepted by ``validate``: a generated Å/eV file read as Bohr/Hartree or n2p2
    (a store in the wrong units), and what ``run`` hit only after featurizing."""
    from dparallel.errors import ConfigError
    from dparallel.workflow.spec import load_quickstart

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=says):
        load_quickstart(overrides).check()


@pytest.mark.parametrize(
    "overrides",
    [
        ["dataset.units=bohr-hartree", "dataset.generate=null"],
        ["dataset.energy_key=dft_energy", "dataset.forces_key=dft_forces", "dataset.generate=null"],
        ["dataset.energy_key=energy", "dataset.forces_key=forces"],  # what generate writes
        ["training.descriptor=neighbor_sum", "descriptors.neighbor_sum={elements: [Cu]}"],
        ["descriptors.derivatives=false", "training.force_weight=0"],
        ["descriptors.derivatives=false", "training.descriptor_source=computed"],
        ["output.model_dir=runs/quickstart/store.zarr2"],
        ["store.path=s3://bucket/store.zarr", "output.model_dir=s3:/bucket/store.zarr"],
    ],
)
def test_sections_that_fit_pass(overrides, tmp_path, monkeypatch):
    from dparallel.workflow.spec import load_quickstart

    monkeypatch.chdir(tmp_path)
    load_quickstart(overrides).check_sections()


def test_the_training_config_knows_every_workflow_section() -> None:
    """train/spec.py cannot import the workflow (a layer above): its copy of the section
    names must follow WorkflowSpec's fields, or a workflow file with a new section would
    be refused (or read whole) as a training config."""
    from dparallel.train.spec import _WORKFLOW_SECTIONS
    from dparallel.workflow.spec import WorkflowSpec

    assert set(WorkflowSpec.model_fields) - {"training"} == _WORKFLOW_SECTIONS


#: A scheduler reached over TLS (its certificate files relative to the working directory).
_TLS = [
    "cluster.kind=address",
    "cluster.address=tls://127.0.0.1:1",
    "cluster.tls={ca_file: ca.pem, cert: c.pem}",
]


@pytest.mark.parametrize(
    ("overrides", "setup", "says"),
    [
        (["dataset.generate=null"], "", r"^dataset.path: input file not found: .*emt_cu.extxyz"
         r": give an existing structure file, or a dataset.generate section"),
        (["dataset.path=data"], "data/", r"^dataset.path: .*data is a folder, not a structure"),
        (["store.path=data"], "data/x", r"^store.path: .*data exists and is not a dparallel "
         r"store \(it holds x\)"),
        (["store.path=data/emt_cu.extxyz"], "data/emt_cu.extxyz", r"^store.path: .*emt_cu"
         r".extxyz is a file, not a dparallel store"),
        (["store.path=w.yaml"], "w.yaml", r"^store.path: .*w.yaml is a file, not a dparallel"),
        (["store.path=f/s.zarr"], "f", r"^store.path: refusing to write a store at .*f/s.zarr: "
         r".*f is a file, not a folder"),
        (["output.model_dir=f"], "f", r"^output.model_dir: refusing to write a model into f: "
         r"it is a file, not a folder"),
        (["output.model_dir=m"], "m/notes.txt", r"^output.model_dir: .* into m: it holds files "
         r"dparallel did not write \(notes.txt\)"),
        (["output.model_dir=runs"], "", r"^output.model_dir: refusing to write a model into "
         r"runs: it holds .*store.zarr, which this run reads"),
        (["training.init_from=src", "output.model_dir=src/m"], "src/model.pt",
         r"^output.model_dir: refusing to write a model into src/m: it lies inside .*src, "
         r"which this run reads"),  # the model init_from starts from
        (_TLS, "ca.pem", r"^cluster.tls.cert: certificate file 'c.pem' does not exist"),
        (["dataset.path=f/cu.extxyz"], "f", r"^dataset.path: .*f is a file, not a folder: "
         r"generate cannot write below it"),
        ([], "runs/quickstart/store.scaling.data/", r"^store.path: refusing to write scaling "
         r"data at .*store.scaling.data: it is a folder"),
        ([], "runs/quickstart/store.scaling.data", r"^store.path: refusing to write scaling "
         r"data at .*store.scaling.data: it holds something else than scaling data"),
    ],
)  # fmt: skip
def test_validate_refuses_what_run_finds_at_the_paths(overrides, setup, says, tmp_path,
                                                      monkeypatch):  # fmt: skip
    """``validate`` said ok to each; ``run`` refused it (the model folder only after
    featurizing): the one check both make reads the local paths (nothing is written)."""
    from dparallel.workflow.spec import load_quickstart

    monkeypatch.chdir(tmp_path)
    _make(tmp_path, setup, "x\n")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(ConfigError, match=says):
        load_quickstart(overrides).check(protect=["w.yaml"])
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


def _make(root: Path, setup: str, text: str) -> None:
    """A file at ``setup`` below ``root`` (a folder where it ends in /; none where empty)."""
    if not setup:
        return
    target = (root / setup).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    if setup.endswith("/"):
        target.mkdir()
    else:
        target.write_text(text)


@pytest.mark.parametrize(
    ("overrides", "setup"),
    [
        ([], ""),  # generated on the first run
        (["dataset.generate=null"], "data/emt_cu.extxyz"),
        (["store.path=data"], "data/"),  # an empty folder
        (["output.model_dir=m"], "m/.dparallel-model.json"),  # a folder of ours
        (["store.path=s3://bucket/s.zarr", "output.model_dir=runs"], ""),  # URL: not a folder
        (["cluster.tls={ca_file: ca.pem, cert: c.pem}"], ""),  # a local cluster: no TLS
        (
            [
                "descriptors.acsf=null",
                "descriptors.neighbor_sum={elements: [Cu]}",
                "training.descriptor=neighbor_sum",
            ],
            "runs/quickstart/store.scaling.data/",
        ),  # unused
    ],
)
def test_paths_run_accepts_pass(overrides, setup, tmp_path, monkeypatch):
    from dparallel.workflow.spec import load_quickstart

    monkeypatch.chdir(tmp_path)
    _make(tmp_path, setup, "{}\n")
    load_quickstart(overrides).check_paths(protect=["w.yaml"])


def test_validate_protects_the_workflow_file_as_run_does(tmp_path, monkeypatch, capsys):
    """``validate`` judges the store path with the workflow file as an input of the run."""
    monkeypatch.chdir(tmp_path)
    data = _quickstart()
    data["store"].update(path="w.yaml", overwrite=True)
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(data))
    assert main(["validate", "w.yaml"]) == 2
    said = capsys.readouterr().err.replace(f"{tmp_path}/", "")
    assert "w.yaml: store.path: refusing to replace w.yaml: it is or holds w.yaml, which" in said


def test_a_finished_model_folder_is_left_to_run(tmp_path, monkeypatch):
    """run keeps a finished model of another configuration and trains beside it
    (model-2): validate (and run's own check) refused it (here an older model folder, no
    marker, with a user's note; or the last model continued from with init_from), which
    worked before the paths were checked."""
    import json

    from dparallel.workflow.spec import load_quickstart

    monkeypatch.chdir(tmp_path)
    model = tmp_path / "runs" / "quickstart" / "model"
    model.mkdir(parents=True)
    (model / "model.pt").write_bytes(b"weights")
    (model / "metrics.json").write_text(json.dumps({"final": {"test": {}}}))
    (model / "NOTES.txt").write_text("a user's note")
    load_quickstart([]).check(protect=["w.yaml"])
