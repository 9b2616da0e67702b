"""`dparallel featurize` on a local cluster as a user sees it: link, bar, summary, no chatter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
import yaml

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

DESCRIPTORS = {
    "acsf": {
        "elements": ["Cu"],
        "r_cut": 4.5,
        "cutoff": "cos",
        "radial": [[0.5, 0.0]],
        "narrow": [[0.02, 1.0, 1.0, 0.0]],
        "wide": [],
    }
}


def _featurize(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    from dparallel.datasets import write_emt_cu

    source = tmp_path / "cu.extxyz"
    if not source.exists():
        write_emt_cu(source, n_structures=12, seed=5)
        (tmp_path / "d.yaml").write_text(yaml.safe_dump(DESCRIPTORS))
    store = tmp_path / f"s{len(flags)}.zarr"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    return subprocess.run(
        [sys.executable, "-m", "dparallel", *flags, "featurize", str(source), "-o", str(store),
         "--descriptors", str(tmp_path / "d.yaml"), "--local", "1", "--partition-atoms", "40"],
        env=env, capture_output=True, text=True, timeout=240, check=True,
    )  # fmt: skip


def test_quiet_by_default_dask_logs_with_verbose(tmp_path: Path) -> None:
    quiet = _featurize(tmp_path)
    assert "dashboard: http://127.0.0.1:" in quiet.stderr
    assert "featurize " not in quiet.stderr  # no progress bar into a pipe (a terminal only)
    assert "12 structures" in quiet.stdout and "done in" in quiet.stdout
    assert "INFO distributed" not in quiet.stderr
    info = subprocess.run(
        [sys.executable, "-m", "dparallel", "info", str(tmp_path / "s0.zarr"), "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    report = json.loads(info.stdout)
    assert report["complete"] is True and report["partitions_done"] == report["partitions_total"]
    verbose = _featurize(tmp_path, "-v")
    assert "INFO distributed.scheduler" in verbose.stderr


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_foreign_target_is_refused_before_a_cluster_starts(
    tmp_path, monkeypatch, capsys, overwrite
):
    """A folder holding the user's files is never written over, ``--overwrite`` or not: the
    command says so in one line before it starts a cluster, whose workers would create
    the log file beside the folder (the bigger the input, the surer)."""
    import dparallel.cli.featurize as cli_featurize
    from dparallel.cli.main import main
    from dparallel.datasets import write_emt_cu

    def no_cluster(args):  # noqa: ANN001, ANN202
        raise AssertionError("a cluster was started for a target that is refused")

    monkeypatch.setattr(cli_featurize, "connect_early", no_cluster)
    data = write_emt_cu(tmp_path / "cu.extxyz", n_structures=4, seed=1)
    desc = tmp_path / "d.yaml"
    desc.write_text("acsf: {elements: [Cu], r_cut: 3.0, radial: [[0.5, 0.0]]}\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    argv = ["featurize", str(data), "-o", str(mine), "--descriptors", str(desc), "-q"]
    assert main([*argv, *(["--overwrite"] if overwrite else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a dparallel store" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cu.extxyz", "d.yaml", "mine"]
    assert (mine / "notes.txt").read_text() == "the user's"


def test_scaling_data_without_acsf_is_refused_before_featurizing(
    tmp_path, monkeypatch, capsys
) -> None:  # noqa: ANN001
    """``--scaling-data`` (n2p2's scaling.data of the ACSF features) with neighbor sums alone
    was refused only after the whole store was computed ('has no acsf statistics')."""
    import dparallel.cli.featurize as cli_featurize
    import dparallel.workflow.featurize as workflow_featurize
    from dparallel.cli.main import main
    from dparallel.datasets import write_emt_cu

    def never(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("featurized before refusing")

    monkeypatch.setattr(cli_featurize, "connect_early", lambda args, cluster=None: None)
    monkeypatch.setattr(workflow_featurize, "featurize", never)
    data = write_emt_cu(tmp_path / "cu.extxyz", n_structures=2, seed=1)
    desc = tmp_path / "ns.yaml"
    desc.write_text("neighbor_sum: {elements: [Cu], r_cut: 4.0}\n")
    argv = ["featurize", str(data), "-o", str(tmp_path / "s.zarr"), "--descriptors", str(desc)]
    assert main([*argv, "--scaling-data", str(tmp_path / "s.data"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no acsf section" in err, err
    assert not (tmp_path / "s.zarr").exists() and not (tmp_path / "s.data").exists()


@pytest.mark.parametrize(
    "descriptors",
    [
        {
            "neighbor_sum": {"elements": ["Cu"], "r_cut": 4.5, "n_sensitivities": 4},
            "derivatives": True,
        },
        {**DESCRIPTORS, "derivatives": False},
    ],
    ids=["neighbor_sum only", "no derivatives"],
)
def test_the_train_command_it_suggests_trains(tmp_path: Path, descriptors: dict) -> None:
    # it said `dparallel train STORE -o model/ --set epochs=100` for every store, which
    # refused one without ACSF (training's default descriptor) or without dG/dr (forces)
    from dparallel.datasets import write_emt_cu

    write_emt_cu(tmp_path / "cu.extxyz", n_structures=12, seed=5)  # so _featurize keeps d.yaml
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(descriptors))
    out = _featurize(tmp_path).stdout
    suggested = next(line.split() for line in out.splitlines() if "dparallel train " in line)
    assert suggested[:2] == ["dparallel", "train"] and "--set" in suggested, out
    small = ["--set", "epochs=1", "--set", "hidden=[4]", "-q"]
    trained = subprocess.run(
        [sys.executable, "-m", "dparallel", *suggested[1:], *small],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    assert (tmp_path / "model" / "model.pt").is_file()
