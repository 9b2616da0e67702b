"""One config loader: one YAML reader, one ``--set`` grammar, one rule for relative paths."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from dparallel.cli.main import main
from dparallel.config import apply_overrides, read_yaml, resolve_path
from dparallel.errors import ConfigError
from dparallel.train import TrainingSpec, parse_training_spec
from dparallel.workflow.descriptors_spec import load_descriptors
from dparallel.workflow.spec import QUICKSTART, load_workflow

ROOT = Path(__file__).resolve().parents[1]
_EVIL = "!!python/object/apply:os.system ['touch dparallel-pwned']"


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", str(QUICKSTART), "--set", f"training.epochs={_EVIL}"],
        ["train", "x.zarr", "-o", "m", "--set", f"epochs={_EVIL}"],
        ["run", str(QUICKSTART), "--set", "training.hidden=[1, 2"],
    ],
)
def test_bad_yaml_in_set_is_one_clean_line(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert not (tmp_path / "dparallel-pwned").exists()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"dparallel {argv[0]}: error: --set ")
    assert "the value is not valid YAML" in err
    assert "Traceback" not in err


def test_one_set_grammar_for_every_command():
    data = {"a": {"b": 1}}
    assert apply_overrides(data, ["a.c.d=true"]) == {"a": {"b": 1, "c": {"d": True}}}
    for bad in ("novalue", "=1", "a..b=1", ".a=1"):
        with pytest.raises(ConfigError, match=r"expected key\.path=value"):
            apply_overrides({}, [bad])
    with pytest.raises(ConfigError, match=r"expected key\.path=value"):
        parse_training_spec(None, ["epochs"])
    # train: keys with or without the section prefix mean the same
    plain = parse_training_spec(None, ["epochs=5", "hidden=[8, 4]"])
    prefixed = parse_training_spec(None, ["training.epochs=5", "training.hidden=[8, 4]"])
    assert plain == prefixed
    assert plain.epochs == 5 and plain.hidden == (8, 4)


def test_train_config_accepts_a_workflow_file_and_a_plain_file(tmp_path):
    workflow = load_workflow(QUICKSTART)
    from_workflow = parse_training_spec(QUICKSTART)
    assert from_workflow == workflow.training
    plain = tmp_path / "train.yaml"
    plain.write_text(yaml.safe_dump({"epochs": 3, "lr": 1e-3}))
    assert parse_training_spec(plain) == TrainingSpec(epochs=3, lr=1e-3)
    section = tmp_path / "section.yaml"
    section.write_text(yaml.safe_dump({"training": {"epochs": 4}}))
    assert parse_training_spec(section).epochs == 4
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump({"train": {"epochs": 4}}))
    with pytest.raises(ConfigError, match="called 'training:'"):
        parse_training_spec(old)
    no_training = tmp_path / "wf.yaml"
    data = yaml.safe_load(QUICKSTART.read_text())
    del data["training"]
    no_training.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="no 'training' section"):
        parse_training_spec(no_training)
    with pytest.raises(ConfigError, match=r"epochz: Extra inputs"):
        parse_training_spec(QUICKSTART, ["training.epochz=1"])
    with pytest.raises(ConfigError, match=r"  epoch: .*; did you mean 'epochs'\? \(--set epoch=1"):
        parse_training_spec(QUICKSTART, ["epoch=1"])  # the closest key, as a workflow's


def test_train_command_reads_the_training_section_of_a_workflow(tmp_path, capsys):
    """`dparallel train --config workflow.yaml` gets past the config (fails at the store)."""
    rc = main(["train", str(tmp_path / "no.zarr"), "-o", str(tmp_path / "m"), "--config",
               str(QUICKSTART)])  # fmt: skip
    assert rc == 2
    err = capsys.readouterr().err
    assert "store not found" in err and "invalid training config" not in err


def test_read_yaml_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"missing.yaml: workflow file not found"):
        read_yaml(tmp_path / "missing.yaml", "workflow")
    with pytest.raises(ConfigError, match="cannot read"):
        read_yaml(tmp_path, "workflow")  # a directory
    (tmp_path / "tag.yaml").write_text(f"a: {_EVIL}\n")
    with pytest.raises(ConfigError, match=r"tag.yaml: not valid YAML"):
        read_yaml(tmp_path / "tag.yaml")
    # PyYAML keeps the last of two equal keys: a second section replaced the first whole
    (tmp_path / "twice.yaml").write_text("training:\n  epochs: 3\nx: 1\ntraining:\n  lr: 0.1\n")
    with pytest.raises(
        ConfigError, match=r"twice.yaml: .*'training' is given twice \(lines 1 and 4\)"
    ):
        read_yaml(tmp_path / "twice.yaml")
    (tmp_path / "nested.yaml").write_text("a:\n  b: 1\n  b: 2\nc: [{d: 1}, {d: 2}]\n")
    with pytest.raises(ConfigError, match=r"'b' is given twice"):
        read_yaml(tmp_path / "nested.yaml")
    # merge keys may be overridden, as YAML means them; an unhashable key stays YAML's error
    (tmp_path / "merge.yaml").write_text("b: &b {lr: 1, epochs: 3}\nt: {<<: *b, lr: 2}\n")
    assert read_yaml(tmp_path / "merge.yaml")["t"] == {"lr": 2, "epochs": 3}
    (tmp_path / "key.yaml").write_text("? [1, 2]\n: 3\n")
    with pytest.raises(ConfigError, match="unhashable key"):
        read_yaml(tmp_path / "key.yaml")


def test_relative_paths_are_taken_from_the_working_directory(tmp_path, monkeypatch):
    """`featurize --workflow` and `run` resolve `acsf.n2p2` the same way: from the cwd."""
    monkeypatch.chdir(ROOT)
    workflow = ROOT / "workflows" / "n2p2.yaml"
    via_featurize = load_descriptors(workflow, section="descriptors")
    via_run = load_workflow(workflow).descriptors.build()
    assert via_featurize.to_dict() == via_run.to_dict()
    # A descriptors file in another folder: its relative path still starts at the cwd.
    (tmp_path / "conf").mkdir()
    (tmp_path / "nets").mkdir()
    shutil.copy(ROOT / "workflows" / "n2p2" / "input.nn", tmp_path / "nets" / "input.nn")
    desc = tmp_path / "conf" / "descriptors.yaml"
    desc.write_text(yaml.safe_dump({"acsf": {"n2p2": "nets/input.nn"}}))
    monkeypatch.chdir(tmp_path)
    assert load_descriptors(desc).acsf.features("Cu") == via_run.acsf.features("Cu")
    monkeypatch.chdir(tmp_path / "conf")
    with pytest.raises(Exception, match=r"nets/input.nn"):
        load_descriptors(desc)
    assert resolve_path("x/y") == tmp_path / "conf" / "x" / "y"


def test_a_bad_value_from_set_is_named_as_the_user_wrote_it():
    """``--set training.epochs=abc``: the message named the file, as if it held the value."""
    from dparallel.train.spec import parse_training_spec
    from dparallel.workflow.spec import load_quickstart

    with pytest.raises(ConfigError, match=r"training.epochs: .* \(--set training.epochs=abc\)"):
        load_quickstart(["training.epochs=abc"])
    with pytest.raises(ConfigError, match=r"\n  epochs: .* \(--set training.epochs=abc\)"):
        parse_training_spec(None, ["training.epochs=abc"])
    with pytest.raises(ConfigError) as info:
        parse_training_spec({"epochs": "no"}, ["lr=x"])
    lines = str(info.value).splitlines()[1:]
    assert any(line.startswith("  lr: ") and line.endswith("(--set lr=x)") for line in lines)
    assert any(line.startswith("  epochs: ") and "--set" not in line for line in lines)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("partitioning.atoms", "true", "partitioning.atoms: Input should be a valid integer"),
        ("training.epochs", "true", "training.epochs: Input should be a valid integer"),
        ("training.epochs", "'5'", "training.epochs: Input should be a valid integer"),
        ("training.lr", "true", "training.lr: Input should be a valid number"),
        ("training.hidden", "[8, true]", "training.hidden.1: Input should be a valid integer"),
        ("descriptors.acsf.r_cut", "true", "descriptors.acsf.r_cut: Input should be a valid num"),
        ("descriptors.acsf.cutoff", "true", "descriptors.acsf.cutoff: Input should be a valid"),
        ("descriptors.acsf.radial", "[[true, 0.0]]", "descriptors.acsf.radial.0.0: Input should"),
        ("descriptors.derivatives", "1", "descriptors.derivatives: Input should be a valid bool"),
        ("cluster.n_workers", "true", "cluster.n_workers: Input should be a valid integer"),
        ("cluster.connect_timeout", ".inf", "cluster.connect_timeout: Input should be a finite"),
        ("store.overwrite", "1", "store.overwrite: Input should be a valid boolean, got 1"),
        ("store.overwrite", "'on'", "store.overwrite: Input should be a valid boolean, got 'on'"),
        ("output.export", "0", "output.export: Input should be a valid boolean, got 0"),
        ("training.data_on_device", "1", "training.data_on_device: Input should be a valid bool"),
    ],
)
def test_no_spec_turns_a_boolean_or_a_string_into_a_number_or_back(key, value, expected):
    """pydantic's lax mode read ``r_cut: true`` as a 1 Å cutoff, ``epochs: true`` as 1,
    ``hidden: [true, true]`` as [1, 1] and ``overwrite: 1`` or ``"on"`` as true."""
    from dparallel.workflow.spec import load_quickstart

    with pytest.raises(ConfigError) as info:
        load_quickstart([f"{key}={value}"])
    lines = str(info.value).splitlines()
    assert len(lines) == 2, lines  # the file, then one line naming the key and the --set
    assert lines[1].startswith(f"  {expected}"), lines[1]
    assert lines[1].endswith(f"(--set {key}={value})")


def test_yaml_forms_of_numbers_tuples_and_paths_are_still_read():
    """Strict types keep what YAML cannot write otherwise: an int for a float, a list for a
    tuple, a string for a path; ``1e-3`` (a string to PyYAML's YAML 1.1) is a number."""
    from dparallel.workflow.spec import WorkflowSpec, load_quickstart

    spec = load_quickstart(
        ["training.lr=1e-3", "training.lr_min=1.0e-5", "descriptors.acsf.r_cut=5",
         "training.hidden=[8, 4]", "descriptors.acsf.radial=[[1, 0]]",
         "cluster.scheduler_file=s.json", "training.force_weight=2E+0"]
    )  # fmt: skip
    assert spec.training is not None and spec.training.lr == 1e-3
    assert spec.training.lr_min == 1e-5 and spec.training.force_weight == 2.0
    assert spec.descriptors.acsf.r_cut == 5.0 and spec.training.hidden == (8, 4)
    assert spec.descriptors.acsf.radial == [(1.0, 0.0)]
    assert spec.cluster.scheduler_file == Path("s.json")
    assert WorkflowSpec.model_validate(spec.to_dict()) == spec  # as stored, read back


def test_a_union_is_one_line_with_what_came():
    with pytest.raises(ConfigError) as info:
        parse_training_spec(None, ["batch_prefetch=true"])
    assert str(info.value).splitlines()[1:] == [
        "  batch_prefetch: Input should be a valid integer or 'auto', got true "
        "(--set batch_prefetch=true)"
    ]


def test_set_refuses_a_key_given_twice_as_files_do():
    """``--set 'training={epochs: 1, epochs: 2}'`` took the last, files refuse it."""
    with pytest.raises(ConfigError, match=r"--set .*: the key 'epochs' is given twice"):
        parse_training_spec(None, ["training={epochs: 1, epochs: 2}"])


def test_exponent_numbers_in_files(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("lr: 3e-3\nlr_min: 1e-5\nweight_decay: 1.0e-4\n")
    spec = parse_training_spec(path)
    assert (spec.lr, spec.lr_min, spec.weight_decay) == (3e-3, 1e-5, 1e-4)
    assert yaml.safe_load("1e-3") == "1e-3"  # PyYAML's own loader is left as it was


@pytest.mark.parametrize(
    ("text", "stray"),
    [
        ("training:\n  epochs: 1\nlr: 0.5\nbatch_sizee: 3\n", "'lr', 'batch_sizee'"),
        ("epochs: 1\ntraining:\n", "'epochs'"),
    ],
)
def test_train_config_refuses_keys_beside_its_training_section(tmp_path, text, stray):
    """Keys beside ``training:`` were dropped silently (``epochs: 1`` trained 300 epochs)."""
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        parse_training_spec(path)
    assert str(info.value) == (
        f"{path}: {stray} beside the 'training:' section would not be read: move them into it"
    )
    path.write_text("name: x\ntraining:\n  epochs: 2\n")  # a workflow's sections stay allowed
    assert parse_training_spec(path).epochs == 2


def test_an_unknown_key_is_named_whatever_it_looks_like():
    with pytest.raises(ConfigError) as info:
        parse_training_spec({"Epochs": 3, "int": 1, "hidden": "x"})
    assert sorted(str(info.value).splitlines()[1:]) == [
        "  Epochs: Extra inputs are not permitted; did you mean 'epochs'?",
        "  hidden: Input should be a valid tuple, got 'x'",
        "  int: Extra inputs are not permitted",
    ]


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["training.force_weight_start=3", "training.schedule=none"], "schedule: none"),
        (["descriptors.derivatives=false"], "descriptors.derivatives is false"),
        (["output.model_dir=runs/quickstart/store.zarr/m"], "inside store.path"),
        (["training.descriptor=neighbor_sum"], "no 'neighbor_sum' section"),
    ],
)
def test_a_check_across_sections_names_the_file_and_the_set(tmp_path, capsys, overrides, named):
    """``validate`` named neither the file nor the ``--set`` behind a check of one section
    against another (or of a section's own keys together)."""
    from dparallel.cli.main import main
    from dparallel.workflow.spec import QUICKSTART

    argv = ["validate", str(QUICKSTART)]
    for item in overrides:
        argv += ["--set", item]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert f"{QUICKSTART}: " in err and named in err, err
    assert all(f"(--set {item})" in err for item in overrides), err


def test_a_device_setting_is_checked_in_one_place_with_one_message(capsys) -> None:  # noqa: ANN001
    """The spec, the CLI's --device and the device resolver had a pattern each (two with
    their own messages)."""
    import ast

    from dparallel.errors import DeviceError
    from dparallel.nn.device import resolve_device

    message = "device 'gpu': expected auto, cpu, cuda or cuda:N"
    with pytest.raises(ConfigError, match=message):
        parse_training_spec(None, ["device=gpu"])
    with pytest.raises(DeviceError, match=message):
        resolve_device("gpu")
    with pytest.raises(SystemExit):
        main(["train", "x.zarr", "-o", "m", "--device", "gpu"])
    assert message in capsys.readouterr().err
    assert parse_training_spec(None, ["device=cuda:1"]).device == "cuda:1"
    root = Path(__file__).resolve().parents[1] / "dparallel"
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            spelled = isinstance(node, ast.Constant) and r"cuda:\d" in str(node.value)
            if spelled and path.name != "config.py":
                pytest.fail(f"{path}:{node.lineno} spells the device pattern again")


def test_differences_is_the_one_config_comparison() -> None:
    """The store's and the run directories' config comparisons were two copies."""
    from dparallel.config import differences
    from dparallel.store._create import _changed_keys
    from dparallel.workflow.run_dirs import _changed

    old = {"a": 1, "b": {"c": [1], "d": {"e": {"f": 1}}}, "g": 2}
    new = {"a": 1, "b": {"c": [2], "d": {"e": {"f": 3}}}, "h": 2}
    assert differences(old, old) == []
    assert differences(old, new) == [
        ("b.c", [1], [2]), ("b.d.e.f", 1, 3), ("g", 2, None), ("h", None, 2)
    ]  # fmt: skip
    assert [k for k, _, _ in differences(old, new, depth=3)] == ["b.c", "b.d.e", "g", "h"]
    assert differences(1, {"a": 1}) == [("", 1, {"a": 1})]
    assert _changed_keys(old, new) == ["b.c", "b.d.e", "g", "h"]
    assert _changed_keys(None, new) == ["(whole value)"]
    assert _changed(old, new)[:2] == ["b.c: [1] → [2]", "b.d.e.f: 1 → 3"]


@pytest.mark.parametrize(
    ("overrides", "named", "not_named"),
    [
        # "training.descriptor" is a prefix of the "training.descriptor_source" the text
        # names: it was attached as if it caused the check's failure
        (
            ["training.descriptor=acsf", "descriptors.derivatives=false"],
            ["descriptors.derivatives=false"],
            ["training.descriptor=acsf"],
        ),
        # a descriptors check names the key below its section ("elements"): was unnamed
        (["descriptors.acsf.elements=[Cu, Cu]"], ["descriptors.acsf.elements=[Cu, Cu]"], []),
        (
            ["dataset.path=x.xyz", "output.model_dir=runs/quickstart/store.zarr/m"],
            ["output.model_dir=runs/quickstart/store.zarr/m"],
            ["dataset.path=x.xyz"],  # "store.path" in the text is another key's "path"
        ),
    ],
)
def test_a_check_names_the_set_items_of_the_keys_it_names_and_no_other(
    capsys, overrides, named, not_named
):
    """``validate``'s checks after the schema find the ``--set`` behind a problem as the
    schema's errors do (``config.named_overrides``), not by a substring of the text."""
    from dparallel.cli.main import main
    from dparallel.workflow.spec import QUICKSTART

    argv = ["validate", str(QUICKSTART)]
    for item in overrides:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert all(f"(--set {item})" in err for item in named), err
    assert not any(f"(--set {item})" in err for item in not_named), err


def test_named_overrides_is_the_one_rule_for_both_kinds_of_error():
    from dparallel.config import named_overrides

    items = ["training.lr=0.1", "training.descriptor=x", "store.path=s", "name=n"]
    # the item that gave the key at fault, or a key above it
    assert named_overrides("training.lr", "anything", items) == ["training.lr=0.1"]
    assert named_overrides("training.lr.x", "", items) == ["training.lr=0.1"]
    # else the keys below the place that the text names, whole
    assert named_overrides("training", "lr (0.1) is not read", items) == ["training.lr=0.1"]
    assert named_overrides("training", "training.descriptor_source: computed", items) == []
    top = "output.model_dir (m) is inside store.path (s); the names"
    assert named_overrides("(top level)", top, items) == ["store.path=s"]
    # `dparallel train`'s keys without their "training." prefix
    assert named_overrides("lr", "", ["training.lr=1"], root="training") == ["training.lr=1"]


def test_read_json_object_is_empty_for_anything_but_a_readable_json_object(tmp_path) -> None:
    from dparallel.config import read_json_object

    (tmp_path / "ok.json").write_text('{"format": "dparallel", "n": [1, 2]}')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "cut.json").write_text('{"format": "dparal')
    (tmp_path / "latin1.json").write_bytes(b'{"a": "\xe9"}')
    (tmp_path / "folder.json").mkdir()
    assert read_json_object(tmp_path / "ok.json") == {"format": "dparallel", "n": [1, 2]}
    for name in ("list", "cut", "latin1", "folder", "missing"):
        assert read_json_object(tmp_path / f"{name}.json") == {}, name


def test_env_number_reads_a_number_and_refuses_anything_else_naming_the_variable(
    monkeypatch,
) -> None:
    import pytest

    from dparallel.config import env_number
    from dparallel.errors import ConfigError

    monkeypatch.delenv("DPARALLEL_X", raising=False)
    assert env_number("DPARALLEL_X", 60, "seconds") == 60.0
    for raw, want in (("", 60.0), (" 2.5 ", 2.5), ("0", 0.0), ("1e3", 1000.0)):
        monkeypatch.setenv("DPARALLEL_X", raw)
        assert env_number("DPARALLEL_X", 60, "seconds") == want, raw
    for raw in ("abc", "-1", "nan", "inf", "60s"):
        monkeypatch.setenv("DPARALLEL_X", raw)
        want = rf"DPARALLEL_X='{raw}': not a number ≥ 0 \(seconds\)"
        with pytest.raises(ConfigError, match=want):
            env_number("DPARALLEL_X", 60, "seconds")
    monkeypatch.setenv("DPARALLEL_X", "0")
    with pytest.raises(ConfigError, match="not a number > 0"):
        env_number("DPARALLEL_X", 60, "seconds", positive=True)


def test_size_and_timeout_settings_from_the_environment_are_config_errors_when_bad(
    monkeypatch, tmp_path
) -> None:
    """A bad value was a bare ValueError deep inside training or the lease (or, for the
    remote cache, silently the default); a lease timeout of 0 let any run take over."""
    import pytest

    from dparallel.errors import ConfigError
    from dparallel.store import StoreLease
    from dparallel.store._read_cache import cache_budget
    from dparallel.train.data import train_cache_bytes

    monkeypatch.setenv("DPARALLEL_TRAIN_CACHE_MB", "512")
    assert train_cache_bytes() == 512 << 20
    monkeypatch.setenv("DPARALLEL_TRAIN_CACHE_MB", "lots")
    with pytest.raises(ConfigError, match="DPARALLEL_TRAIN_CACHE_MB='lots'"):
        train_cache_bytes()
    monkeypatch.setenv("DPARALLEL_REMOTE_CACHE_MB", "-5")
    with pytest.raises(ConfigError, match="DPARALLEL_REMOTE_CACHE_MB='-5'"):
        cache_budget()
    for raw in ("0", "soon"):
        monkeypatch.setenv("DPARALLEL_LEASE_TIMEOUT", raw)
        with pytest.raises(ConfigError, match=f"DPARALLEL_LEASE_TIMEOUT='{raw}'"):
            StoreLease(tmp_path / "s.zarr")


def _no_home() -> Path:
    raise RuntimeError("Could not determine home directory.")


def test_cache_dir_needs_no_home_folder_where_the_variable_names_one(tmp_path, monkeypatch):
    """A uid without a passwd entry and HOME unset (containers): Path.home() raises."""
    from dparallel.config import cache_dir, writable_cache_dir

    monkeypatch.setattr(Path, "home", staticmethod(_no_home))
    monkeypatch.setenv("DPARALLEL_CACHE_DIR", str(tmp_path / "cache"))
    assert cache_dir() == tmp_path / "cache"
    assert writable_cache_dir("logs") == tmp_path / "cache" / "logs"
    monkeypatch.delenv("DPARALLEL_CACHE_DIR")
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    assert writable_cache_dir("numba") == tmp_path / f"dparallel-{os.getuid()}" / "numba"


def test_no_writable_cache_folder_is_an_error_naming_the_variable(tmp_path, monkeypatch):
    from dparallel.config import writable_cache_dir

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("DPARALLEL_CACHE_DIR", str(blocked / "cache"))
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(blocked / "tmp"))
    with pytest.raises(ConfigError, match="set DPARALLEL_CACHE_DIR to a writable folder"):
        writable_cache_dir("numba")


def test_a_temporary_cache_folder_others_can_write_is_refused(tmp_path, monkeypatch):
    """numba's cache holds code: a dparallel-UID folder another user made or can write into
    in a shared /tmp is never used."""
    from dparallel.config import temporary_cache_dir

    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    assert temporary_cache_dir() == tmp_path / f"dparallel-{os.getuid()}"
    assert (tmp_path / f"dparallel-{os.getuid()}").stat().st_mode & 0o777 == 0o700
    (tmp_path / f"dparallel-{os.getuid()}").chmod(0o755)  # ours, made readable (an older run)
    assert temporary_cache_dir().stat().st_mode & 0o777 == 0o700  # made private again
    (tmp_path / f"dparallel-{os.getuid()}").chmod(0o777)
    with pytest.raises(ConfigError, match="not a folder of this user's alone"):
        temporary_cache_dir()
