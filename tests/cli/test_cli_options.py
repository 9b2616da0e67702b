"""Options shared by the sub-commands: numbers out of range and scheduler addresses that
are not addresses are one line of error before anything runs (not a traceback later, nor
silently accepted)."""

from __future__ import annotations

import contextlib

import pytest

from dparallel.cli.main import main


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--torch-threads", "0", "needs at least 1 thread, got 0"),
        ("--torch-threads", "-3", "needs at least 1 thread, got -3"),
        ("--gpus", "-1", "needs at least 0 GPU workers, got -1"),
        ("--local", "0", "needs at least 1 worker, got 0"),
        ("--partition-atoms", "0", "needs at least 1 atom, got 0"),
        ("--partition-atoms", "x", "expected a whole number, got 'x'"),
        ("--memory-limit", "lots", "memory_limit 'lots' is no amount of memory"),
        ("--memory-limit", "3", "memory_limit 3.0 is neither a fraction of memory"),
    ],
)
def test_featurize_numbers_out_of_range_are_one_line(tmp_path, capsys, option, value, says):
    argv = ["featurize", str(tmp_path / "in.xyz"), "-o", str(tmp_path / "s.zarr"), option, value]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: {says}" in err and "Traceback" not in err
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("value", ["0", "-3"])
def test_evaluate_batch_out_of_range_is_one_line(tmp_path, capsys, value):
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path), str(tmp_path / "in.xyz"), "--batch", value])
    assert f"--batch: needs at least 1 structure, got {value}" in capsys.readouterr().err


def test_local_wins_over_a_scheduler_in_the_environment(monkeypatch):
    """The environment's scheduler is the default's replacement, not --local's: with both,
    --local N started nothing local and failed on the environment's address."""
    import argparse

    from dparallel.cli._options import add_cluster_arguments, cluster_kwargs

    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:1")
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    kwargs = cluster_kwargs(parser.parse_args(["--local", "2"]))
    assert kwargs["cluster"].kind == "local" and kwargs["cluster"].n_workers == 2
    from dparallel.cluster.expected import expected_workers

    assert expected_workers(kwargs["cluster"]) == 2  # a local cluster of 2, not "unknown"


@pytest.mark.parametrize(
    ("argv", "limit"),
    [(["--memory-limit", "2GiB"], "2GiB"), (["--memory-limit", "0.25", "--local", "2"], 0.25)],
)
def test_memory_limit_reaches_the_local_workers_of_featurize_and_of_a_workflow(
    monkeypatch, argv, limit
):
    """--memory-limit, the option a worker killed for memory is told to raise, sets the
    local cluster's memory_limit, also over a workflow's cluster section."""
    import argparse

    from dparallel.cli._options import add_cluster_arguments, cluster_kwargs
    from dparallel.cluster import ClusterSpec

    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    assert cluster_kwargs(args)["cluster"].memory_limit == limit
    workflow = ClusterSpec(n_workers=3, memory_limit="1GiB")
    merged = cluster_kwargs(args, workflow)["cluster"]
    assert merged.memory_limit == limit and merged.n_workers == (2 if "--local" in argv else 3)


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--scheduler", "tcp://127.0.0.1:1"], False),
        (["--scheduler-file", "s.json"], False),
        ([], True),  # DASK_SCHEDULER_ADDRESS: that cluster's workers
    ],
)
def test_memory_limit_for_workers_started_elsewhere_is_refused(tmp_path, monkeypatch, argv, env):
    """--memory-limit only sizes the workers a local cluster starts: with a scheduler of
    its own the run would ignore it silently."""
    import argparse

    from dparallel.cli._options import add_cluster_arguments, cluster_kwargs
    from dparallel.errors import ConfigError

    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    if env:
        monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:1")
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    with pytest.raises(ConfigError, match=r"`dask worker --memory-limit`"):
        cluster_kwargs(parser.parse_args([*argv, "--memory-limit", "2GiB"]))


@pytest.mark.parametrize(
    ("argv", "env", "cluster", "started"),
    [
        (["--local", "2"], True, None, True),  # --local beats the variable (it was skipped)
        (["--local", "2"], False, None, True),
        ([], False, None, True),
        ([], True, None, False),  # the variable's scheduler: no local workers
        (["--scheduler", "tcp://127.0.0.1:1"], False, None, False),
        (["--scheduler-file", "s.json"], False, None, False),
        ([], False, {"kind": "address", "address": "tcp://127.0.0.1:1"}, False),
        (["--local", "2"], False, {"kind": "address", "address": "tcp://127.0.0.1:1"}, True),
    ],
)
def test_early_forkserver_starts_exactly_when_connect_starts_a_local_cluster(
    monkeypatch, argv, env, cluster, started
):
    """``featurize --local N`` with DASK_SCHEDULER_ADDRESS set skipped the early forkserver:
    the CLI read the variable before --local dropped it. It now asks connection_kind after
    the --local rule, as connect() does."""
    import argparse

    import dparallel.cluster.forkserver as forkserver
    from dparallel.cli._options import add_cluster_arguments, cluster_kwargs, local_forkserver
    from dparallel.cluster import ClusterSpec
    from dparallel.cluster.where import connection_kind

    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    if env:
        monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:1")
    calls: list[tuple] = []
    monkeypatch.setattr(forkserver, "start_forkserver", lambda *a, **k: calls.append(a))
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    spec = None if cluster is None else ClusterSpec(**cluster)
    with local_forkserver(args, spec):  # featurize: first, before cluster_kwargs
        pass
    assert bool(calls) is started
    where = cluster_kwargs(args, spec)  # what connect() is then given
    kind = connection_kind(where.pop("cluster"), **where)
    assert (kind == "local") is started


@pytest.mark.parametrize("refused", [False, True])
def test_a_refusal_inside_the_early_forkserver_block_stops_the_server(monkeypatch, refused):
    """The forkserver starts before the command's checks; a check that refuses stops it
    again (a refused command leaves nothing running), one that passes keeps it."""
    import argparse

    import dparallel.cluster.forkserver as forkserver
    from dparallel.cli._options import add_cluster_arguments, local_forkserver
    from dparallel.errors import UnsafePathError

    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    events: list[str] = []
    started = lambda *a, **k: events.append("start") or True  # noqa: E731
    monkeypatch.setattr(forkserver, "start_forkserver", started)
    monkeypatch.setattr(forkserver, "stop_forkserver", lambda: events.append("stop"))
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    args = parser.parse_args(["--local", "2"])
    with contextlib.suppress(UnsafePathError), local_forkserver(args):
        events.append("checks")
        if refused:
            raise UnsafePathError("refusing")
    assert events == (["start", "checks", "stop"] if refused else ["start", "checks"])


@pytest.mark.parametrize(
    ("argv", "env", "checked"),
    [
        (["--gpus", "1"], False, True),
        (["--gpus", "1"], True, False),  # the environment's scheduler: its workers' GPUs
        (["--gpus", "1", "--local", "2"], True, True),
        (["--gpus", "1", "--scheduler", "tcp://127.0.0.1:1"], False, False),
    ],
)
def test_gpus_are_checked_on_this_machine_only_for_a_local_cluster(monkeypatch, argv, env, checked):
    """--gpus N is checked against this machine's GPUs only where connect() starts the
    cluster here (it was checked with DASK_SCHEDULER_ADDRESS naming a remote scheduler)."""
    import argparse

    import dparallel.cluster.gpus as gpus
    from dparallel.cli._options import add_cluster_arguments, cluster_kwargs

    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    if env:
        monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:1")
    calls: list[int] = []
    monkeypatch.setattr(gpus, "check_gpus", calls.append)
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    cluster_kwargs(parser.parse_args(argv))
    assert bool(calls) is checked


@pytest.mark.parametrize(
    ("argv", "warned"),
    [
        (["--scheduler", "tcp://127.0.0.1:1", "--gpus", "1"], "--gpus starts GPU workers"),
        (["--scheduler", "tcp://127.0.0.1:1", "--dashboard-address", ":0"], "--dashboard-addr"),
        (["--scheduler-file", "s.json", "--dashboard-address", ":0"], "--dashboard-address"),
        (["--local", "2", "--dashboard-address", ":0"], None),
        (["--dashboard-address", ":0"], "slurm"),  # its scheduler starts here: no warning
    ],
)
def test_options_of_a_local_cluster_are_warned_where_none_is_started(monkeypatch, argv, warned):
    """--gpus and --dashboard-address did nothing with --scheduler, in silence (as
    --memory-limit is refused there)."""
    import argparse
    import warnings

    from dparallel.cli._options import add_cluster_arguments, cluster_kwargs

    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    from dparallel.cluster import ClusterSpec

    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    spec = ClusterSpec(kind="slurm") if warned == "slurm" else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kwargs = cluster_kwargs(parser.parse_args(argv), spec)
    said = [str(w.message) for w in caught]
    if warned == "slurm":
        assert said == [] and kwargs["cluster"].dashboard_address == ":0"
    elif warned is None:
        assert said == []
    else:
        assert len(said) == 1 and said[0].startswith(warned) and "not started here" in said[0]


def test_featurize_workflow_gives_the_dataset_settings_the_command_line_leaves_out(tmp_path):
    # `featurize SOURCE --workflow wf.yaml` took only the workflow's descriptors: its
    # dataset.units: bohr-hartree was ignored and the data read as Å (features, and an
    # n2p2 input.nn's lengths, silently in the wrong units), unlike `dparallel run wf.yaml`
    import yaml

    from dparallel.cli.featurize import source_settings
    from dparallel.cli.main import build_parser
    from dparallel.workflow.spec import QUICKSTART

    data = yaml.safe_load(QUICKSTART.read_text())
    data["dataset"].update(format="n2p2", units="bohr-hartree", on_error="skip", generate=None)
    data["partitioning"] = {"atoms": 500}
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(yaml.safe_dump(data))
    (tmp_path / "d.yaml").write_text("acsf: {elements: [Cu], radial: [[0.1, 0.0]]}\n")
    data["dataset"]["path"] = str(tmp_path / "input.data")
    workflow.write_text(yaml.safe_dump(data))
    base = ["featurize", str(tmp_path / "input.data"), "-o", "s.zarr"]

    def settings(*argv: str) -> tuple:
        args = build_parser().parse_args([*base, *argv])
        got = source_settings(args)
        assert got is args  # main() reads log_file and restore_logging from its own args
        return got.format, got.units, got.on_error, got.partition_atoms

    assert settings("--workflow", str(workflow)) == ("n2p2", "bohr-hartree", "skip", 500)
    given = ["--format", "extxyz", "--units", "ase", "--on-error", "raise",
             "--partition-atoms", "7"]  # fmt: skip
    assert settings("--workflow", str(workflow), *given) == ("extxyz", "ase", "raise", 7)
    assert settings("--descriptors", str(tmp_path / "d.yaml")) == (None, "ase", "raise", None)
    # another file than the workflow's: its format is guessed and its units are Å/eV (a
    # workflow in bohr-hartree read any SOURCE, an extxyz in Å say, as Bohr)
    base[1] = "other.xyz"
    assert settings("--workflow", str(workflow)) == (None, "ase", "skip", 500)
    assert settings("--workflow", str(workflow), "--units", "bohr-hartree")[1] == "bohr-hartree"


def test_featurize_workflow_gives_its_dataset_label_keys_for_its_dataset_only(tmp_path):
    import yaml

    from dparallel.cli.featurize import source_settings
    from dparallel.cli.main import build_parser
    from dparallel.workflow.spec import QUICKSTART

    data = yaml.safe_load(QUICKSTART.read_text())
    data["dataset"].update(path=str(tmp_path / "d.xyz"), generate=None, energy_key="dft_e",
                           forces_key="dft_f")  # fmt: skip
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(yaml.safe_dump(data))

    def keys(source: str, *argv: str) -> tuple:
        argv = ("featurize", source, "-o", "s.zarr", "--workflow", str(workflow), *argv)
        got = source_settings(build_parser().parse_args(argv))
        return got.energy_key, got.forces_key

    assert keys(str(tmp_path / "d.xyz")) == ("dft_e", "dft_f")
    assert keys(str(tmp_path / "d.xyz"), "--energy-key", "e2") == ("e2", "dft_f")
    assert keys(str(tmp_path / "other.xyz")) == (None, None)  # another file: the defaults


@pytest.mark.parametrize(
    ("source", "written"),
    [("file://{dir}/input.data", "{dir}/input.data"), ("{dir}/input.data", "file://{dir}/input.data"),
     ("s3://b/d/input.data", "s3://b/d//input.data")],
)  # fmt: skip
def test_featurize_workflow_knows_its_dataset_however_the_location_is_written(
    tmp_path, source, written
):
    # SOURCE and dataset.path name one file, written once as file:// (or an s3:// key with
    # an empty segment, which every reader drops): `featurize` compared the text, took them
    # for two files and read the bohr-hartree data as Å/eV
    import yaml

    from dparallel.cli.featurize import source_settings
    from dparallel.cli.main import build_parser
    from dparallel.workflow.spec import QUICKSTART

    data = yaml.safe_load(QUICKSTART.read_text())
    path = written.format(dir=tmp_path)
    data["dataset"].update(path=path, format="n2p2", units="bohr-hartree", generate=None)
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(yaml.safe_dump(data))
    argv = ["featurize", source.format(dir=tmp_path), "-o", "s.zarr", "--workflow", str(workflow)]
    got = source_settings(build_parser().parse_args(argv))
    assert (got.format, got.units) == ("n2p2", "bohr-hartree")


@pytest.mark.parametrize("option", ["--units", "--potential-units"])
def test_evaluate_units_are_checked_as_ingest_and_featurize_check_them(tmp_path, capsys, option):
    # --units bohr: first a warning "DATA is read as bohr", then the unknown-units error
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path), str(tmp_path / "in.xyz"), option, "bohr"])
    err = capsys.readouterr().err
    assert f"argument {option}: invalid choice: 'bohr' (choose from " in err
    assert "WARNING" not in err


def test_every_units_option_offers_the_one_list_of_unit_systems():
    # export --units took any text (refused late, or never: `export MODEL --units bohr`)
    # where evaluate, ingest and featurize offer the unit systems of dparallel.io.units
    import argparse

    from dparallel.cli.main import build_parser
    from dparallel.io.units import UNIT_SYSTEMS

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = {
        (name, option): action.choices
        for name, sub in commands.choices.items()
        for action in sub._actions
        for option in action.option_strings
        if option in ("--units", "--potential-units")
    }
    assert {name for name, _ in found} >= {"evaluate", "export", "ingest", "featurize"}
    assert {key: choices for key, choices in found.items() if choices != sorted(UNIT_SYSTEMS)} == {}


def test_export_units_are_checked_before_anything_is_read(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["export", str(tmp_path), "--units", "bohr"])
    assert "argument --units: invalid choice: 'bohr' (choose from " in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--units", "bohr-hartree"], ["-o", "elsewhere"]])
def test_export_of_a_dparallel_model_refuses_the_n2p2_file_options(tmp_path, capsys, option):
    # they were accepted and ignored: deployed.pt is in Å and eV, written beside model.pt
    (tmp_path / "model.pt").write_bytes(b"")
    assert main(["export", str(tmp_path), *option]) == 2
    err = capsys.readouterr().err
    assert f"{option[0]} is for --format n2p2 or an n2p2 potential directory" in err
    assert not (tmp_path / "export.json").exists()


@pytest.mark.parametrize(
    "option", [["-o", "elsewhere"], ["--float32"], ["--aoti"], ["--no-artifacts"]]
)
def test_export_of_an_n2p2_potential_refuses_the_dparallel_model_options(tmp_path, capsys, option):
    # they were accepted and ignored: an n2p2 potential's export writes lammps.model in place
    (tmp_path / "input.nn").write_text("number_of_elements 1\nelements H\n")
    assert main(["export", str(tmp_path), *option]) == 2
    err = capsys.readouterr().err
    assert f"{option[0]} is for a dparallel model directory" in err
    assert str(tmp_path) in err
    assert not (tmp_path / "lammps.model").exists()


@pytest.mark.parametrize("command", ["featurize", "demo"])
def test_a_log_file_below_a_file_is_refused_before_any_work(tmp_path, monkeypatch, capsys, command):
    # --log-file data.xyz/run.log ran the whole command and wrote no log, silently (the
    # log file is opened at the first record, and its handler is silent when it cannot)
    import dparallel.cli.featurize as cli_featurize
    import dparallel.workflow.run as workflow_run
    from dparallel.datasets import write_emt_cu

    def no_work(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the command started work with a log it cannot write")

    monkeypatch.setattr(cli_featurize, "connect_early", no_work)
    monkeypatch.setattr(workflow_run, "run_workflow", no_work)
    monkeypatch.chdir(tmp_path)
    data = write_emt_cu(tmp_path / "cu.extxyz", n_structures=4, seed=1)
    desc = tmp_path / "d.yaml"
    desc.write_text("acsf: {elements: [Cu], r_cut: 3.0, radial: [[0.5, 0.0]]}\n")
    log = data / "logs" / "run.log"
    if command == "featurize":
        argv = ["featurize", str(data), "-o", str(tmp_path / "s.zarr"), "--descriptors",
                str(desc)]  # fmt: skip
    else:
        argv = ["demo", "--set", "cluster.n_workers=1"]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main([*argv, "-q", "--local", "1", "--log-file", str(log)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"dparallel {command}: error: refusing to write the log to {log}: {data} is a file, "
        "not a folder; choose another --log-file"
    ), err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_a_log_files_missing_folders_are_created(tmp_path, monkeypatch):
    # --log-file logs/today/run.log (folders that do not exist yet) wrote no log, silently;
    # they are created as an output folder is (dparallel.cluster.logs routes the records)
    import argparse
    import logging

    from dparallel.cli._options import route_cluster_logs

    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(log_file="logs/today/run.log", verbose=0)
    path = route_cluster_logs(args, tmp_path / "s.zarr")
    try:
        logging.getLogger("distributed.scheduler").warning("a record of the run")
    finally:
        args.restore_logging()
    assert path == tmp_path / "logs" / "today" / "run.log"
    assert args.log_file == str(path)
    assert "distributed.scheduler WARNING: a record of the run" in path.read_text()


def test_a_scheduler_where_nothing_listens_is_one_line_at_once(tmp_path, capsys):
    # `--scheduler tcp://127.0.0.1:PORT` of a scheduler not running waited out the 10 s
    # connect timeout before its error line
    import socket
    import time

    from dparallel.datasets import write_emt_cu

    data = write_emt_cu(tmp_path / "cu.extxyz", n_structures=2, seed=1)
    desc = tmp_path / "d.yaml"
    desc.write_text("acsf: {elements: [Cu], r_cut: 3.0, radial: [[0.5, 0.0]]}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"  # closed again: nobody listens
    argv = ["featurize", str(data), "-o", str(tmp_path / "s.zarr"), "--descriptors", str(desc)]
    t0 = time.monotonic()
    assert main([*argv, "-q", "--scheduler", address]) == 2
    assert time.monotonic() - t0 < 5.0
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dparallel featurize: error: cannot reach the Dask scheduler at "
                          f"{address!r}: the connection is refused"), err  # fmt: skip
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("option", ["--float32", "--aoti", "--no-artifacts"])
def test_export_format_n2p2_refuses_the_deployed_files_options(tmp_path, capsys, option):
    # they were accepted and ignored: n2p2 files hold float64 numbers, no deployed.pt/artifacts
    (tmp_path / "model.pt").write_bytes(b"")
    assert main(["export", str(tmp_path), "--format", "n2p2", option]) == 2
    err = capsys.readouterr().err
    assert f"{option} is for deployed.pt" in err and "--format n2p2" in err
    assert not (tmp_path / "n2p2").exists()


def test_export_format_n2p2_of_an_n2p2_potential_says_what_it_is(tmp_path, capsys):
    # it said "no trained model at DIR/model.pt; run `dparallel train` first"
    (tmp_path / "input.nn").write_text("number_of_elements 1\nelements H\n")
    assert main(["export", str(tmp_path), "--format", "n2p2"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} is an n2p2 potential already" in err
    assert "dparallel train" not in err and not (tmp_path / "n2p2").exists()


def _commands_with(option: str) -> list[str]:
    import argparse

    from dparallel.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(
        name
        for name, parser in sub.choices.items()
        if any(option in action.option_strings for action in parser._actions)
    )


def test_every_device_option_takes_the_same_settings(capsys):
    assert {"train", "run", "evaluate"} <= set(_commands_with("--device"))
    for name in _commands_with("--device"):
        with pytest.raises(SystemExit):
            main([name, "--device", "gpu"])
        assert "device 'gpu': expected auto, cpu, cuda or cuda:N" in capsys.readouterr().err


def test_evaluate_predicts_on_the_device_given(tmp_path, capsys):
    # evaluate had no --device (train and run have it): it predicted on the CPU only
    import json

    import numpy as np
    import torch

    from dparallel.datasets import write_emt_cu
    from dparallel.deploy import DEPLOYED, DeployedModel
    from dparallel.descriptors import ACSF
    from dparallel.train import HDNNP

    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.5, 0.0), (1.0, 2.5)], narrow=[])
    torch.manual_seed(0)
    net = HDNNP(["Cu"], {"Cu": acsf.n_features("Cu")}, hidden=[4]).double()
    net.set_scaling("Cu", np.zeros(acsf.n_features("Cu")), 1.0)
    DeployedModel(acsf, net).save(tmp_path / DEPLOYED)
    data = write_emt_cu(tmp_path / "cu.xyz", 3, seed=1)
    argv = ["evaluate", str(tmp_path), str(data), "--json"]
    assert main([*argv, "--device", "cpu"]) == 0
    on_cpu = json.loads(capsys.readouterr().out)
    if not torch.cuda.is_available():
        assert main([*argv, "--device", "cuda:0"]) == 2
        assert "'cuda:0' asked for" in capsys.readouterr().err
        return
    assert main([*argv, "--device", "cuda"]) == 0
    assert json.loads(capsys.readouterr().out) == pytest.approx(on_cpu, rel=1e-9)
