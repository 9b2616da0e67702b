"""A worker running another dparallel than the client is refused before any task runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from daskprocs import ROOT, child_env, start_scheduler, start_worker, stop

from dparallel.cluster.installs import check_worker_installs, installed
from dparallel.errors import ClusterError

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.timeout(240)


def _copy_of_dparallel(where: Path, change: bool) -> Path:
    """A copy of this dparallel's source under ``where`` (one comment added: ``change``)."""
    shutil.copytree(
        ROOT / "dparallel", where / "dparallel", ignore=shutil.ignore_patterns("__pycache__")
    )
    if change:
        path = where / "dparallel" / "kernels" / "__init__.py"
        path.write_text(path.read_text() + "# another commit\n")
    return where


def _reported(pythonpath: Path, cwd: Path) -> str:
    code = "from dparallel.cluster.installs import installed; print(installed()['dparallel'])"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=child_env({"PYTHONPATH": str(pythonpath)}),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip()


def test_two_commits_of_one_version_are_told_apart(tmp_path: Path) -> None:
    """The same source elsewhere reports the same; one changed line, another."""
    same = _copy_of_dparallel(tmp_path / "same", change=False)
    other = _copy_of_dparallel(tmp_path / "other", change=True)
    here = installed()["dparallel"]
    assert _reported(same, tmp_path) == here
    theirs = _reported(other, tmp_path)
    assert theirs != here and theirs.split()[0] == here.split()[0]  # same version number


def test_a_cuda_build_of_the_same_torch_is_the_same_install(monkeypatch) -> None:
    """A GPU worker's torch 2.13.0+cu126 beside the client's CPU build is no mismatch; a
    worker with another torch release is."""
    from importlib import metadata

    real = metadata.version
    here = installed()

    class Workers:
        def __init__(self, torch: str) -> None:
            self.torch = torch

        def run(self, function, on_error="raise"):  # noqa: ANN001, ANN202 - Client.run's shape
            monkeypatch.setattr(
                metadata, "version", lambda name: self.torch if name == "torch" else real(name)
            )
            installed.cache_clear()
            try:
                return {"tcp://gpu:1": function()}
            finally:
                monkeypatch.setattr(metadata, "version", real)
                installed.cache_clear()
                assert installed() == here

    release = here["torch"]
    check_worker_installs(Workers(f"{release}+cu126"))  # type: ignore[arg-type]
    with pytest.raises(ClusterError, match=r"tcp://gpu:1 runs torch 1\.0\.0 \(here"):
        check_worker_installs(Workers("1.0.0+cu126"))  # type: ignore[arg-type]


@pytest.mark.slow
def test_featurize_refuses_a_worker_of_another_install(tmp_path: Path) -> None:
    """Two `dask worker`s, one importing a changed copy of dparallel: the featurize on
    that cluster fails at once naming that worker."""
    from distributed import Client

    other = _copy_of_dparallel(tmp_path / "other", change=True)
    scheduler, address = start_scheduler(tmp_path)
    workers = [
        start_worker(address, tmp_path / "good.log"),
        start_worker(address, tmp_path / "other.log", env=child_env({"PYTHONPATH": str(other)})),
    ]
    try:
        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=90)
            with pytest.raises(ClusterError) as info:
                check_worker_installs(client)
            odd = [a for a, v in client.run(installed).items() if v != installed()]
            assert len(odd) == 1 and odd[0] in str(info.value), str(info.value)
            assert "dparallel 0." in str(info.value)
        data = tmp_path / "cu.extxyz"
        _write_structures(data)
        descriptors = tmp_path / "descriptors.yaml"
        descriptors.write_text("acsf:\n  elements: [Cu]\n  r_cut: 4.0\n  radial: [[0.5, 0.0]]\n")
        store = tmp_path / "store.zarr"
        argv = [sys.executable, "-m", "dparallel", "featurize", str(data), "-o", str(store)]
        argv += ["--descriptors", str(descriptors), "--scheduler", address, "-q"]
        run = subprocess.run(
            argv, env=child_env(), cwd=tmp_path, capture_output=True, text=True, timeout=180
        )
        assert run.returncode != 0 and "runs dparallel" in run.stderr, run.stderr[-2000:]
        assert "Traceback" not in run.stderr, run.stderr[-2000:]
    finally:
        for proc in (*workers, scheduler):
            stop(proc)


def _write_structures(path: Path) -> None:
    from ase.build import bulk
    from ase.io import write

    atoms = bulk("Cu", "fcc", a=3.6, cubic=True)
    atoms.info["energy"] = -1.0
    write(path, [atoms, atoms], format="extxyz")


@pytest.mark.integration
def test_a_worker_that_cannot_import_dparallel_is_named_in_one_clusterror(tmp_path: Path) -> None:
    """A `dask worker` whose environment has no dparallel: the probe cannot even be
    unpickled there, and distributed 2026.8 re-raises that as a plain ``Exception`` (its
    text only), which escaped as a traceback; now one ClusterError naming the worker."""
    from distributed import Client

    blocked = tmp_path / "blocked" / "dparallel"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text('raise ImportError("no dparallel here")\n')
    scheduler, address = start_scheduler(tmp_path)
    env = child_env({"PYTHONPATH": str(blocked.parent)})
    worker = start_worker(address, tmp_path / "worker.log", env=env)
    try:
        with Client(address, timeout=30) as client:
            client.wait_for_workers(1, timeout=90)
            (name,) = client.scheduler_info()["workers"]
            with pytest.raises(ClusterError) as info:
                check_worker_installs(client)
    finally:
        stop(worker)
        stop(scheduler)
    text = str(info.value)
    assert name in text and "no dparallel here" in text and "\n" not in text, text
    assert "install the client's dparallel" in text, text


def test_a_task_refuses_a_worker_of_another_install() -> None:
    """The task's own check (for a worker that joined after check_worker_installs): the
    client's install passes; another dparallel is named with the client's."""
    from dparallel.cluster.installs import refuse_other_install

    refuse_other_install(installed())
    other = {**installed(), "dparallel": "0.0.1 (source 000000000000)"}
    with pytest.raises(ClusterError) as info:
        refuse_other_install(other)
    text = str(info.value)
    assert f"this process runs dparallel {installed()['dparallel']} (client 0.0.1" in text, text


@pytest.mark.slow
def test_a_worker_of_another_install_that_joined_late_computes_nothing(
    tmp_path: Path, monkeypatch
) -> None:
    """A worker of a changed dparallel that the up-front check did not see (it joined
    later: here the check is skipped) used to featurize its partitions with its own code;
    now each of its tasks refuses, naming it, and writes nothing."""
    import dparallel.cluster.installs as installs
    from dparallel.errors import PartitionFailedError
    from dparallel.store import open_store
    from dparallel.workflow.descriptors_spec import load_descriptors
    from dparallel.workflow.featurize import FeaturizeOptions, featurize

    other = _copy_of_dparallel(tmp_path / "other", change=True)
    scheduler, address = start_scheduler(tmp_path)
    worker = start_worker(
        address, tmp_path / "other.log", env=child_env({"PYTHONPATH": str(other)})
    )
    monkeypatch.setattr(installs, "check_worker_installs", lambda client: None)  # joined late
    try:
        data = tmp_path / "cu.extxyz"
        _write_structures(data)
        spec = tmp_path / "descriptors.yaml"
        spec.write_text("acsf:\n  elements: [Cu]\n  r_cut: 4.0\n  radial: [[0.5, 0.0]]\n")
        how = FeaturizeOptions(scheduler=address, partition_atoms=4, retries=0)
        with pytest.raises(PartitionFailedError) as info:
            featurize(data, tmp_path / "store.zarr", load_descriptors(spec), how)
    finally:
        stop(worker)
        stop(scheduler)
    text = str(info.value)
    assert "runs dparallel 0." in text and "(client " in text, text
    assert len(open_store(tmp_path / "store.zarr").done_partitions()) == 0
