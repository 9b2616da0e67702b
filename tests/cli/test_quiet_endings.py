"""A closed pipe ends quietly; the filesystem root as output is one line, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

from dparallel.cli.main import CLOSED_PIPE, warning_lines

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def test_a_closed_pipe_ends_quietly():
    """``dparallel schema | head``: the reader is gone before the first write."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dparallel", "schema"],
            stdout=write, stderr=subprocess.PIPE, text=True, env=_env(), timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == CLOSED_PIPE


def test_the_root_as_output_is_one_line(tmp_path):
    data = tmp_path / "in.xyz"
    data.write_text('1\nProperties=species:S:1:pos:R:3 pbc="F F F"\nH 0 0 0\n')
    done = subprocess.run(
        [sys.executable, "-m", "dparallel", "ingest", str(data), "-o", "/", "--overwrite"],
        capture_output=True, text=True, env=_env(), timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "dparallel ingest: error: refusing to replace /: it is the filesystem root"
    ]


def test_the_root_as_featurize_output_is_one_line_before_a_cluster(tmp_path):
    """Featurize refuses the root before it starts a forkserver or a cluster (a log file
    ``/.log`` would be the workers' first write)."""
    data = tmp_path / "in.xyz"
    data.write_text('1\nProperties=species:S:1:pos:R:3 pbc="F F F"\nH 0 0 0\n')
    desc = tmp_path / "d.yaml"
    desc.write_text("acsf: {elements: [H], r_cut: 3.0, radial: [[0.5, 0.0]]}\n")
    argv = ["featurize", str(data), "-o", "/", "--descriptors", str(desc), "--local", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "dparallel", *argv],
        capture_output=True, text=True, env=_env(), timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "dparallel featurize: error: refusing to write a store at /: it is the filesystem root"
    ]


def test_a_python_warning_is_one_clean_line_once(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        undo = warning_lines("featurize")
        try:
            for _ in range(2):
                warnings.warn("1 partitions for 2 workers:\n  1 worker stays idle", stacklevel=1)
        finally:
            undo()
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "dparallel featurize: warning: 1 partitions for 2 workers: 1 worker stays idle"
    ]
    assert "UserWarning" not in err and ".py" not in err
