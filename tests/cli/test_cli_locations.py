"""Options that name a local file or folder (model directories, config files, the log):
a URL is refused in one line before anything runs, never taken for the relative path
``./s3:/…``; and the defaults that need a folder find one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dparallel.cli._options import default_log_file

_CASES = {
    "train -o": (["train", "s3://b/x.zarr", "-o", "s3://b/model"], "the model directory"),
    "train --config": (
        ["train", "x.zarr", "-o", "m", "--config", "s3://b/t.yaml"],
        "a training config file",
    ),
    "export": (["export", "s3://b/model"], "the model directory"),
    "export -o": (["export", "m", "--format", "n2p2", "-o", "s3://b/pot"], "n2p2 output"),
    "evaluate": (["evaluate", "s3://b/model", "x.xyz"], "the model directory"),
    "featurize --descriptors": (
        ["featurize", "x.xyz", "-o", "s3://b/x.zarr", "--descriptors", "s3://b/d.yaml"],
        "a descriptors file",
    ),
    "featurize --log-file": (
        [
            "featurize",
            "x.xyz",
            "-o",
            "x.zarr",
            "--descriptors",
            "d.yaml",
            "--log-file",
            "s3://b/x.log",
        ],
        "the log file",
    ),
    "run": (["run", "s3://b/wf.yaml"], "a workflow file"),
    "validate --set output.model_dir": (
        ["validate", "WORKFLOW", "--set", "output.model_dir=s3://b/model"],
        "the model directory",
    ),
}


def _dparallel(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dparallel", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("case", list(_CASES))
def test_a_url_where_a_local_path_is_needed_is_refused_in_one_line(case, tmp_path):
    argv, what = _CASES[case]
    workflow = Path(__file__).parents[2] / "workflows" / "quickstart.yaml"
    argv = [str(workflow) if a == "WORKFLOW" else a for a in argv]
    done = _dparallel(argv, tmp_path)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert f"{what}" in last and "needs a local path, not a URL" in last, done.stderr
    assert "Traceback" not in done.stderr
    assert not any(tmp_path.iterdir())  # no ./s3:/… folder, nothing else


def test_the_log_of_a_url_store_goes_to_the_temporary_folder_under_a_read_only_home(
    tmp_path, monkeypatch
):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("DPARALLEL_CACHE_DIR", str(blocked / "cache"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    log = default_log_file("s3://bucket/feats.zarr")
    assert log.parent.is_dir() and str(log).startswith(str(tmp_path / "tmp"))
    assert log.name == "s3-bucket_feats.zarr.log"


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("data.extxyz", "the run reads or writes it"),
        ("d.yaml", "the run reads or writes it"),
        ("s.zarr.log", "the run reads or writes it"),
        ("s.zarr/x.data", "inside the store"),
        ("folder", "it is a folder"),
        ("notes.txt", "something else than scaling data"),
        # both were found after the whole run ("No such file or directory: nodir/s.data.…partial")
        ("nodir/s.data", "its folder nodir does not exist"),
        ("notes.txt/s.data", "notes.txt is a file, not a folder"),
    ],
)
def test_scaling_data_never_replaces_what_is_not_scaling_data(target, reason, tmp_path):
    """``--scaling-data`` named the input (or the descriptors, the log, a file in the
    store, a user's file): it is refused in one line before anything runs, and nothing
    there changes; an earlier scaling.data is replaced as asked."""
    from dparallel.n2p2.scaling_data import format_scaling_data
    from dparallel.workflow.featurize import refuse_scaling_target

    files = {
        "data.extxyz": '1\nPBC="F F F"\nCu 0 0 0\n',
        "d.yaml": "acsf: {elements: [Cu], r_cut: 4.0, radial: [[0.5, 0.0]]}\n",
        "s.zarr.log": "a log\n",
        "notes.txt": "1 2 3\nmy notes\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "folder").mkdir()
    done = _dparallel(
        ["featurize", "data.extxyz", "-o", "s.zarr", "--descriptors", "d.yaml",
         "--scaling-data", target, "--local", "1", "-q"],
        tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert reason in done.stderr.strip().splitlines()[-1] and "Traceback" not in done.stderr
    assert {n: (tmp_path / n).read_text() for n in files} == files
    assert not (tmp_path / "s.zarr").exists()
    earlier = tmp_path / "earlier.scaling.data"
    earlier.write_text(format_scaling_data([np.ones((2, 4))]))
    refuse_scaling_target(earlier, tmp_path / "s.zarr", (tmp_path / "data.extxyz",))
