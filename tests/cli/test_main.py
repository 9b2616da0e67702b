"""The ``dparallel`` command as one tool: the same kind of outcome has the same exit code
and the same form of message in every sub-command (main.py's docstring: 2 for a usage
error, as argparse's, and for a dparallel error; 1 only for a check that found a
problem)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from dparallel.cli.main import build_parser, main


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _valid_argv(name: str, command: argparse.ArgumentParser) -> list[str]:
    """``name`` with a value for each positional and each required option (parsed, not run)."""
    argv = [name]
    for action in command._actions:
        if not action.option_strings:
            argv.append(next(iter(action.choices)) if action.choices else "x")
        elif action.required:
            argv += [action.option_strings[0], "x"]
    for group in command._mutually_exclusive_groups:
        if group.required:
            argv += [group._group_actions[0].option_strings[0], "x"]
    return argv


def test_no_command_is_a_usage_error_with_the_help_on_stderr(capsys) -> None:
    # it printed the help on stdout and exited 1, the code of `info --verify` finding damage
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "usage: dparallel" in err and "COMMAND" in err


@pytest.mark.parametrize("name", sorted(_commands()))
def test_an_unknown_option_is_said_by_its_command(name: str, capsys) -> None:
    # the top-level parser said it: `usage: dparallel [-h] [--version] [-v] COMMAND ...` and
    # `dparallel: error: unrecognized arguments`, naming no command and none of its options
    argv = _valid_argv(name, _commands()[name])
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--no-such-option"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"usage: dparallel {name} ")
    assert err.splitlines()[-1] == (
        f"dparallel {name}: error: unrecognized arguments: --no-such-option"
    )


@pytest.mark.parametrize("name", sorted(_commands()))
def test_verbose_is_taken_after_the_command_too(name: str) -> None:
    # `dparallel info STORE -v` was "unrecognized arguments: -v"
    argv = _valid_argv(name, _commands()[name])
    assert build_parser().parse_args([*argv, "-v"]).verbose == 1
    assert build_parser().parse_args(["-vv", *argv]).verbose == 2  # before it: as before


def test_a_logged_warning_has_the_form_of_the_commands_other_lines(tmp_path) -> None:
    # it was `WARNING dparallel.cli.evaluate: …` beside `dparallel evaluate: error: …` (and
    # a Python warning's `dparallel evaluate: warning: …`)
    import json
    import os
    import subprocess
    import sys

    from ase import Atoms
    from ase.io import write

    model = tmp_path / "model"  # trained from n2p2 data in Bohr and Hartree, never exported
    model.mkdir()
    record = {"data_units": "bohr-hartree", "data_format": "n2p2", "store": "s.zarr"}
    (model / "data_units.json").write_text(json.dumps(record))
    write(tmp_path / "x.extxyz", Atoms("H", positions=[[0, 0, 0]]), format="extxyz")
    argv = [sys.executable, "-m", "dparallel", "evaluate", "model", "x.extxyz"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    ran = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2 and ran.stdout == ""
    lines = ran.stderr.splitlines()
    assert len(lines) == 2, ran.stderr
    assert lines[0].startswith("dparallel evaluate: warning: x.extxyz: read in bohr-hartree")
    assert lines[1].startswith("dparallel evaluate: error: ")
    verbose = subprocess.run([*argv, "-v"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert "WARNING dparallel.cli.evaluate: x.extxyz: read in" in verbose.stderr  # its logger


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_argument_says_what_it_is(name: str) -> None:
    # validate's --set had no help (run's said what it does) and the metavar K=V
    for action in _commands()[name]._actions:
        assert action.help, (name, action.option_strings or action.dest)
        assert action.metavar is None or action.metavar == action.metavar.upper(), action


@pytest.mark.parametrize("name", ["run", "demo"])
def test_a_workflows_cluster_options_default_to_its_cluster_section(name: str) -> None:
    # their help said "default 1" / "default 127.0.0.1:8787" / Dask's memory, though a
    # workflow's cluster section gives them when the command line does not
    from dparallel.cli._options import cluster_kwargs
    from dparallel.cluster import ClusterSpec

    command = _commands()[name]
    helps = {a.option_strings[0]: a.help for a in command._actions if a.option_strings}
    given = {"gpus": 2, "torch_threads": 3, "memory_limit": "3GiB", "dashboard_address": ":0"}
    workflow = ClusterSpec(**given)
    got = cluster_kwargs(command.parse_args([] if name == "demo" else ["w.yaml"]), workflow)
    for key, value in given.items():
        assert getattr(got["cluster"], key) == value
        option = "--" + key.replace("_", "-")
        assert f"default: the workflow's cluster.{key}, else " in " ".join(helps[option].split())


def test_every_command_that_takes_a_scheduler_takes_its_file_too(tmp_path, capsys) -> None:
    # train took --scheduler only: a SLURM user with a scheduler file had no way to give it
    options = {
        name: {o for a in command._actions for o in a.option_strings}
        for name, command in _commands().items()
    }
    takes = {name for name, given in options.items() if "--scheduler" in given}
    assert takes == {name for name, given in options.items() if "--scheduler-file" in given}
    assert "train" in takes
    missing = tmp_path / "scheduler.json"  # train connects before it reads the store
    argv = ["train", str(tmp_path / "s.zarr"), "-o", str(tmp_path / "m"), "-q"]
    assert main([*argv, "--scheduler-file", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dparallel train: error: ") and str(missing) in err, err


@pytest.mark.parametrize("name", sorted(_commands()))
def test_a_default_the_parser_fills_in_is_said_in_the_help(name: str) -> None:
    # evaluate --batch (64) and export --format (dparallel) did not say theirs
    for action in _commands()[name]._actions:
        if action.default in (None, False, [], argparse.SUPPRESS) or not action.option_strings:
            continue
        assert f"default {action.default}" in action.help or (
            f"{action.default} (default" in action.help
            or f"{action.default}; default" in action.help
        ), (name, action.option_strings, action.help)


def test_a_process_without_a_home_folder_is_told_to_set_home(tmp_path, monkeypatch, capsys):
    """HOME unset and a uid without a passwd entry (containers): ASE's import would fail
    with "Could not determine home directory" and a traceback."""

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert main(["evaluate", str(tmp_path / "model"), str(tmp_path / "a.xyz")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dparallel evaluate: error: no home folder: HOME is unset")
    assert "set HOME to a folder" in err
