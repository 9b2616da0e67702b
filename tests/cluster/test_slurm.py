"""``kind: slurm`` for real: dparallel's commands against a single-node SLURM (``slurm``
fixture, tests/cluster/conftest.py) through dask-jobqueue. The store a SLURM run makes is
compared, bitwise, with featurize in one process (no cluster)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("dask_jobqueue")

ROOT = Path(__file__).resolve().parents[2]
PARTITION_ATOMS = 60  # several partitions per worker


def _workflow(tmp_path: Path, slurm: dict) -> Path:
    """The quickstart workflow, tiny, its cluster ``kind: slurm`` with ``slurm``."""
    spec = yaml.safe_load((ROOT / "dparallel" / "workflow" / "quickstart.yaml").read_text())
    spec["dataset"].update(path=str(tmp_path / "cu.xyz"))
    spec["dataset"]["generate"]["n_structures"] = 30
    spec["partitioning"]["atoms"] = PARTITION_ATOMS
    spec["store"]["path"] = str(tmp_path / "store.zarr")
    spec["output"].update(model_dir=str(tmp_path / "model"), export=False)
    spec["training"].update(epochs=1, hidden=[4])
    spec["cluster"] = {
        "kind": "slurm", "dashboard_address": "127.0.0.1:0",
        "slurm": {"memory": "1GB", "walltime": "00:10:00", **slurm},
    }  # fmt: skip
    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _cli(*args: str, cwd: Path) -> subprocess.Popen:
    from daskprocs import child_env

    return subprocess.Popen(
        [sys.executable, "-m", "dparallel", *args], cwd=cwd, env=child_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _assert_same_arrays(made: Path, workflow: Path, source: Path) -> None:
    """Every array of the store ``made`` equals, bitwise, featurize's in one process."""
    import zarr
    from storecompare import assert_same_arrays

    from dparallel.workflow.descriptors_spec import load_descriptors
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    descriptors = load_descriptors(workflow, section="descriptors")
    options = FeaturizeOptions(partition_atoms=PARTITION_ATOMS)
    reference = featurize_in_process(source, made.with_name("reference.zarr"), descriptors, options)
    a = zarr.open_group(store=reference.zarr_store, mode="r")
    assert_same_arrays(a, zarr.open_group(made, mode="r"))


def test_run_on_slurm_makes_the_one_process_store_and_cancels_its_jobs(slurm, tmp_path):
    """``dparallel run`` with ``kind: slurm``: two jobs submitted, their workers featurize,
    training runs, and the jobs are cancelled when the command ends (the queue empty)."""
    workflow = _workflow(tmp_path, {"jobs": 2})
    run = _cli("run", str(workflow), cwd=tmp_path)
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, out
    assert "featurize ran, train ran" in out, out
    assert len(list(tmp_path.glob("slurm-*.out"))) == 2  # the jobs' output: they ran
    slurm.wait_for("the jobs cancelled", lambda: not slurm.jobs(), 30)
    _assert_same_arrays(tmp_path / "store.zarr", workflow, tmp_path / "cu.xyz")


def test_featurize_survives_a_job_cancelled_mid_run(slurm, tmp_path):
    """``dparallel featurize --workflow`` takes the workflow's cluster (``kind: slurm``):
    one of its two jobs cancelled (``scancel``) once partitions are done, the other
    worker computes the rest and the store is the one-process store."""
    from ase.io import write

    from dparallel.datasets import generate_emt_cu

    workflow = _workflow(tmp_path, {"jobs": 2})
    source = tmp_path / "cu.xyz"
    write(source, generate_emt_cu(300), format="extxyz")  # long enough to cancel a job in
    store = tmp_path / "s.zarr"
    featurize = _cli(
        "featurize", str(source), "-o", str(store), "--workflow", str(workflow), cwd=tmp_path
    )
    try:
        done = store / "partitions" / "done"
        slurm.wait_for(
            "a partition done", lambda: featurize.poll() is not None or any(done.glob("c*")), 180
        )
        running = [job for job, state in slurm.jobs() if state == "RUNNING"]
        assert running, featurize.communicate(timeout=60)[0]
        slurm.run("scancel", running[0])
        out, _ = featurize.communicate(timeout=300)
    finally:
        featurize.kill()
    assert featurize.returncode == 0, out
    assert re.search(r"\d+ partitions \(\d+ computed, 0 already done\)", out), out
    assert "CANCELLED" in (tmp_path / f"slurm-{running[0]}.out").read_text()
    slurm.wait_for("the jobs cancelled", lambda: not slurm.jobs(), 30)
    _assert_same_arrays(store, workflow, source)


def test_a_job_slurm_refuses_is_an_error_at_once(slurm):
    """A partition SLURM does not have: ``sbatch``'s answer in a ``ClusterError`` as the
    cluster starts (it failed in a background task, and the run waited for a worker)."""
    from dparallel.cluster import ClusterSpec, connect
    from dparallel.errors import ClusterError

    spec = ClusterSpec(kind="slurm", dashboard_address="127.0.0.1:0", slurm={"queue": "nosuch"})
    start = time.monotonic()
    with pytest.raises(ClusterError, match=r"SLURM refuses the workers' job: .*invalid partition"):
        connect(spec)
    assert time.monotonic() - start < 30
    assert slurm.jobs() == []


def test_the_docs_slurm_example_is_a_job_slurm_takes(slurm, tmp_path):
    """docs/deploy.md's ``kind: slurm`` settings make a job script that SLURM accepts
    (``sbatch --test-only``) on a node of that size (the fixture's node: 16 CPUs, 64 GB,
    partition ``cpu``): partition, account, cores, memory and walltime as written."""
    from dparallel.cluster import ClusterSpec
    from dparallel.cluster.connection import _slurm_cluster

    text = (ROOT / "docs" / "deploy.md").read_text()
    blocks = map(yaml.safe_load, re.findall(r"```yaml\n(.*?)```", text, re.S))
    (example,) = [b["cluster"] for b in blocks if b.get("cluster", {}).get("kind") == "slurm"]
    spec = ClusterSpec.model_validate({**example, "dashboard_address": "127.0.0.1:0"})
    cluster = _slurm_cluster(spec)
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    assert f"-p {spec.slurm.queue}" in script and f"-A {spec.slurm.account}" in script
    (tmp_path / "job.sh").write_text(script)
    slurm.run("sbatch", "--test-only", str(tmp_path / "job.sh"))  # raises if SLURM refuses it
    assert slurm.jobs() == []  # --test-only makes no job


def test_importing_jobqueue_keeps_the_commands_ctrl_c_handler() -> None:
    """dask-jobqueue sets SIGINT's handler to ``sys.exit`` as it is imported (which fails
    outside the main thread, where featurize connects): dparallel imports it keeping the
    handler the command had."""
    from daskprocs import child_env

    code = (
        "import signal; from dparallel.cluster.slurm import import_jobqueue; "
        "before = signal.getsignal(signal.SIGINT); import_jobqueue(); "
        "assert signal.getsignal(signal.SIGINT) is before, signal.getsignal(signal.SIGINT)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_the_printed_dashboard_link_of_a_slurm_cluster_answers(slurm):
    """The scheduler listens on the host's address for its workers, its dashboard on
    ``dashboard_address``'s 127.0.0.1: the link named the scheduler's host, where nothing
    answered (connection refused). The dparallel pages are there too (its preload)."""
    import urllib.request

    from dparallel.cluster import ClusterSpec, connect

    spec = ClusterSpec(kind="slurm", dashboard_address="127.0.0.1:0", slurm={"memory": "1GB"})
    with connect(spec) as handle:
        for url in (handle.dashboard_link, handle.dashboard_pages["json"]):
            with urllib.request.urlopen(url, timeout=10) as answer:
                assert answer.status == 200, url
