"""One clean error line (worker tracebacks in the log file) for the ways a real run ends badly.

Full disk (a real, tiny tmpfs), two runs on one store, Ctrl-C/SIGTERM and a failing
structure, each driven through the command line as a user would, without ``-q``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dparallel.store import lease_path, open_store

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(400)]

DESCRIPTORS = {
    "acsf": {
        "elements": ["Cu"],
        "r_cut": 4.5,
        "radial": [[0.5, 0.0], [1.0, 2.5]],
        "narrow": [[0.02, 1.0, 1.0, 0.0]],
    },
    "derivatives": True,
}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    from dparallel.datasets import write_emt_cu

    source = write_emt_cu(tmp_path / "cu.extxyz", n_structures=40, seed=5)
    desc = tmp_path / "d.yaml"
    desc.write_text(yaml.safe_dump(DESCRIPTORS))
    return {"source": source, "desc": desc, "root": tmp_path}


def _argv(files: dict[str, Path], store: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "dparallel", "featurize", str(files["source"]), "-o", str(store),
            "--descriptors", str(files["desc"]), "--local", "1", "--dashboard-address", ":0",
            "--partition-atoms", "60", *more]  # fmt: skip


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=300)


def _error_lines(stderr: str) -> list[str]:
    """What the user sees on stderr, without the dashboard link and the progress bar."""
    out = []
    for line in stderr.splitlines():
        line = line.split("\r")[-1].strip()
        if line and not line.startswith(("dashboard: ", "featurize [")):
            out.append(line)
    return out


@pytest.fixture
def tiny_disk(tmpfs):
    """A 1 MiB tmpfs (needs root and mount permission; skipped otherwise)."""
    return tmpfs("1m")


def test_full_disk_is_one_line_and_a_rerun_with_space_finishes(files, tmpfs) -> None:
    from same_arrays import assert_same_arrays

    from dparallel.workflow.descriptors_spec import load_descriptors
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    disk = tmpfs("2m")  # room for a few partitions
    store = disk / "s.zarr"
    done = _run(_argv(files, store))
    assert done.returncode == 2, done.stderr
    lines = _error_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        f"dparallel featurize: error: no space left on the device of {store}"
    )
    assert "Traceback" not in done.stderr and "Errno" not in done.stderr
    # nothing half-made is left beside the store, and the same command, once there is room,
    # resumes it (the done partitions kept) to the store a run with room makes
    assert not [p for p in disk.iterdir() if ".creating-" in p.name]
    assert not lease_path(store).exists()
    kept = len(open_store(store).done_partitions())
    assert 0 < kept < open_store(store).n_partitions
    tmpfs.resize(disk, "40m")
    rerun = _run(_argv(files, store, "-q"))
    assert rerun.returncode == 0, rerun.stderr
    assert f"{kept} already done" in rerun.stdout and open_store(store).is_complete
    reference = files["root"] / "reference.zarr"
    options = FeaturizeOptions(partition_atoms=60)
    featurize_in_process(files["source"], reference, load_descriptors(files["desc"]), options)
    assert_same_arrays(reference, store)


def test_second_run_on_the_same_store_is_refused_and_the_first_finishes(files) -> None:
    store = files["root"] / "s.zarr"
    first = subprocess.Popen(_argv(files, store), env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not lease_path(store).exists():
            assert time.monotonic() < deadline and first.poll() is None, "first run never started"
            time.sleep(0.05)
        second = _run(_argv(files, store))
        assert second.returncode == 2
        lines = _error_lines(second.stderr)
        assert len(lines) == 1 and "is being written by dparallel featurize (pid " in lines[0]
        assert "Traceback" not in second.stderr
        _out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert open_store(store).is_complete
    assert not [p for p in files["root"].iterdir() if ".creating-" in p.name]
    third = _run(_argv(files, store, "-q"))
    assert third.returncode == 0 and "(0 computed" in third.stdout, third.stdout


def _done_files(store: Path) -> int:
    """Partitions marked done, counted from their marker files (cheap: no zarr, no imports,
    so a loaded machine does not slow the watcher more than the run)."""
    folder = store / "partitions" / "done"
    return sum(1 for p in folder.iterdir() if p.name.startswith("c.")) if folder.is_dir() else 0


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_mid_run(argv: list[str], store: Path, sig: int) -> tuple[int, str] | None:
    """Start ``argv``, signal it once two partitions are done; (rc, stderr), or ``None``
    when the run finished before it could be interrupted (then a larger input is needed)."""
    # Ctrl-C as in a terminal, also when these tests run in a background job (which
    # ignores SIGINT, and its children inherit that)
    proc = subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_default_sigint)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and _done_files(store) < 2:
            assert time.monotonic() < deadline, "no partition done in 240 s"
            time.sleep(0.02)
        if proc.poll() is not None:  # finished between two looks: not an interruption
            proc.communicate(timeout=60)
            return None
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    if proc.returncode == 0:  # the signal came as it was exiting, all done: not one either
        return None
    return proc.returncode, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_says_what_is_kept_then_rerun_resumes(files, sig) -> None:
    """Robust to load: the watcher waits on a condition (two done markers), and a run that
    finished before the signal could reach it is tried again on a larger input."""
    from dparallel.datasets import write_emt_cu

    for attempt in range(3):
        store = files["root"] / f"s{attempt}.zarr"
        if attempt:  # the run was quicker than the watcher: four times the work
            files["source"] = write_emt_cu(
                files["root"] / f"cu{attempt}.extxyz", n_structures=40 * 4**attempt, seed=5
            )
        outcome = _interrupt_mid_run(_argv(files, store, "--partition-atoms", "30"), store, sig)
        if outcome is not None:
            break
    else:
        pytest.fail("the run finished before it could be interrupted, three times")
    code, err = outcome
    assert code == 130, err
    lines = _error_lines(err)
    assert len(lines) == 1 and "Traceback" not in err, err
    done = len(open_store(store).done_partitions())
    total = open_store(store).n_partitions
    assert f"interrupted; {done} of {total} partitions" in lines[0]
    assert "rerun the same command" in lines[0]
    assert not lease_path(store).exists()
    rerun = _run(_argv(files, store, "--partition-atoms", "30", "-q"))
    assert rerun.returncode == 0 and f"{done} already done" in rerun.stdout, rerun.stdout


def test_worker_tracebacks_go_to_the_log_file_not_the_terminal(files) -> None:
    import ase.io

    frames = ase.io.read(files["source"], ":")
    frames[5].positions[1] = frames[5].positions[0]
    ase.io.write(files["source"], frames, format="extxyz")
    store = files["root"] / "s.zarr"
    done = _run(_argv(files, store))
    assert done.returncode == 2
    log = Path(f"{store}.log")
    assert "Traceback" not in done.stderr and "Compute Failed" not in done.stderr
    lines = _error_lines(done.stderr)
    assert lines[0].startswith("dparallel featurize: error: 1 of ")
    assert f"(details: {log})" in lines[0]
    assert "structure 5: atoms 0 and 1 are at the same position" in done.stderr
    text = log.read_text()
    assert "InvalidStructureError" in text and "Traceback" in text


_TORCH_WRITES = """
import sys, torch
from dparallel._files import write_serialized
from dparallel.errors import DiskFullError
from dparallel.nn.files import save_torch_file
disk = sys.argv[1]
open(f"{disk}/filler", "wb").write(b"x" * 800_000)
net = torch.jit.script(torch.nn.Linear(300, 300))
for name, write in (
    ("a.pt", lambda p: save_torch_file({"w": torch.zeros(100_000)}, p)),
    ("b.ts", lambda p: write_serialized(p, lambda f: torch.jit.save(net, f))),
):
    try:
        write(f"{disk}/{name}")
    except DiskFullError as exc:
        print("full", name, "space" in str(exc))
"""


def test_torch_files_on_a_full_disk_are_one_error_not_an_abort(tiny_disk) -> None:
    """torch's C++ writer aborts the process on a full disk (``terminate called …``, rc
    134: ``export``, a checkpoint); the bytes are made in memory and written by
    dparallel's writer instead: one DiskFullError, nothing left behind."""
    done = _run([sys.executable, "-c", _TORCH_WRITES, str(tiny_disk)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["full a.pt True", "full b.ts True"], done.stdout
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["filler"]


def test_demo_refuses_what_run_refuses_before_any_work(tmp_path, monkeypatch, capsys):
    # `dparallel demo` skipped run's checks: it generated the data and featurized the
    # whole store before training refused a store without derivatives
    from dparallel.cli.main import main

    monkeypatch.chdir(tmp_path)
    small = ["dataset.generate.n_structures=4", "cluster.n_workers=1",
             "cluster.dashboard_address=127.0.0.1:0"]  # fmt: skip
    argv = ["demo", "-q", "--set", "descriptors.derivatives=false"]
    for item in small:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "descriptors.derivatives is false" in err, err
    assert "(--set descriptors.derivatives=false)" in err and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []  # no data generated, no store
