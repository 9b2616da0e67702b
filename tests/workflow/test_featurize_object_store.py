"""Every stage on object storage: moto's S3 server on 127.0.0.1 and Azurite (``az://``,
where it is installed), workers that share no files.

* featurize from an ``s3://`` input into an ``s3://`` store on a Dask cluster whose
  workers (``dask worker`` processes, their own working directory and TMPDIR) cannot read
  the test's folder: an audit hook in each worker refuses every open or listing there
  (checked below by a task that tries), so the input and the store reach them only
  through S3; then train from it;
* the store equals the local run's bitwise, array by array; training from it gives the
  same metrics as from the local store (same seed);
* a second concurrent writer (another process) is refused in one line;
* a client SIGKILLed mid-run resumes to an equal store;
* ``dparallel run`` of the quickstart with both paths on S3 creates nothing locally but
  the model directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from _cu_descriptors import DESCRIPTORS
from s3server import HIDE_PRELOAD, SCHEMES, filesystem, s3_server

from dparallel.errors import StoreError
from dparallel.store import StoreLease, open_store
from dparallel.workflow.featurize import FeaturizeOptions, featurize, featurize_in_process

if TYPE_CHECKING:
    import numpy as np

    from dparallel.descriptors.descriptor_set import DescriptorSet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "dparallel-test"
PARTITION_ATOMS = 150


def _dset() -> DescriptorSet:
    from dparallel.workflow.descriptors_spec import DescriptorsSpec

    return DescriptorsSpec.model_validate(DESCRIPTORS).build()


@pytest.fixture(scope="module", params=["moto", "azurite"])
def s3(request):
    """The server (each test runs once per server); the bucket's URL (``s3://…``, ``az://…``)."""
    with s3_server((BUCKET,), kind=request.param):
        yield f"{SCHEMES[request.param]}://{BUCKET}"


def _put(url: str, data: bytes) -> None:
    """``data`` at ``url`` through a client independent of dparallel's."""
    fs, path = filesystem(url)
    fs.pipe_file(path, data)


@pytest.fixture(scope="module")
def client_dir(tmp_path_factory) -> Path:
    """The test's (client's) own folder: hidden from the workers."""
    return tmp_path_factory.mktemp("client")


@pytest.fixture(scope="module")
def dataset(s3, client_dir) -> tuple[Path, str]:
    """A local EMT Cu file and its copy on the server."""
    from dparallel.datasets import write_emt_cu

    local = write_emt_cu(client_dir / "cu.extxyz", n_structures=40, seed=7)
    url = f"{s3}/data/cu.extxyz"
    _put(url, local.read_bytes())
    return local, url


@pytest.fixture(scope="module")
def reference(dataset, client_dir):
    """The local run: local file into a local store (in process)."""
    local, _ = dataset
    return featurize_in_process(
        local, client_dir / "local.zarr", _dset(), FeaturizeOptions(partition_atoms=PARTITION_ATOMS)
    )


@pytest.fixture(scope="module")
def isolated_cluster(s3, client_dir, tmp_path_factory):
    """``dask scheduler`` + two ``dask worker`` processes that cannot see ``client_dir``."""
    from daskprocs import child_env, dask_executable, start, start_scheduler, stop
    from distributed import Client

    elsewhere = tmp_path_factory.mktemp("workers")
    preload = elsewhere / "hide_client_files.py"
    preload.write_text(HIDE_PRELOAD)
    env = child_env({"DPARALLEL_TEST_HIDDEN": str(client_dir), "TMPDIR": str(elsewhere / "tmp")})
    (elsewhere / "tmp").mkdir()
    scheduler, address = start_scheduler(elsewhere)
    workers = []
    try:
        for k in range(2):
            argv = [dask_executable(), "worker", address, "--nthreads", "1"]
            argv += ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
            argv += ["--preload", str(preload)]
            workers.append(start(argv, elsewhere / f"worker{k}.log", env=env, cwd=elsewhere))
        client = Client(address, timeout=60)
        client.wait_for_workers(2, timeout=120)
        try:
            yield client
        finally:
            client.close()
    finally:
        for proc in workers:
            stop(proc)
        stop(scheduler)


def _arrays(store) -> dict[str, np.ndarray]:
    """Every zarr array of the store, by path."""
    import zarr

    group = zarr.open_group(store=store.zarr_store, mode="r")
    return {k: v[...] for k, v in group.members(max_depth=None) if isinstance(v, zarr.Array)}


def _assert_bitwise(a, b) -> None:
    x, y = _arrays(a), _arrays(b)
    assert sorted(x) == sorted(y) and len(x) > 20
    for key in x:
        assert x[key].dtype == y[key].dtype and x[key].shape == y[key].shape, key
        assert x[key].tobytes() == y[key].tobytes(), key


def test_featurize_s3_to_s3_on_workers_without_the_files_then_train(
    s3, dataset, reference, isolated_cluster, client_dir
):
    local, url = dataset

    def _cannot_read(path: str) -> str:  # nested: pickled by value for the workers
        try:
            with open(path, "rb") as handle:
                handle.read(1)
        except PermissionError as exc:
            return f"refused: {exc}"
        return "read it"

    # honest isolation: the workers cannot even open the input's local copy
    answers = isolated_cluster.run(_cannot_read, str(local))
    assert all(a.startswith("refused") for a in answers.values()), answers
    cwds = isolated_cluster.run(os.getcwd)
    assert all(not c.startswith(str(client_dir)) for c in cwds.values())
    store_url = f"{s3}/stores/cu.zarr"
    result = featurize(
        url,
        store_url,
        _dset(),
        FeaturizeOptions(partition_atoms=PARTITION_ATOMS, client=isolated_cluster),
    )
    assert result.partitions_computed == reference.n_partitions > 1
    remote = open_store(store_url)
    assert remote.is_complete
    _assert_bitwise(reference, remote)

    from dparallel.train import train
    from dparallel.train.spec import TrainingSpec

    spec = TrainingSpec(epochs=2, hidden=(8,), batch_size=4, seed=3, lr=5e-3)
    a = train(reference, client_dir / "model-local", spec)
    b = train(remote, client_dir / "model-s3", spec)
    assert a.validation == b.validation and a.test == b.test
    assert len(a.history) == len(b.history) == 2
    for x, y in zip(a.history, b.history, strict=True):
        keep = [k for k in x if any(m in k for m in ("loss", "rmse", "mae"))]
        assert len(keep) >= 4, x
        assert {k: x[k] for k in keep} == {k: y[k] for k in keep}


def test_label_keys_reach_workers_reading_from_s3(s3, dataset, reference, isolated_cluster):
    """The cluster's workers read an ``s3://`` file whose labels are under dft_energy /
    dft_forces with the keys the client gave (pickled with the source): the store's
    structures, labels included, equal the local reference's (read from energy/forces)."""
    local, _ = dataset
    text = local.read_text()
    renamed = text.replace(" energy=", " dft_energy=").replace(":forces:R:3", ":dft_forces:R:3")
    assert renamed != text
    url = f"{s3}/data/cu-dft.extxyz"
    _put(url, renamed.encode())
    store_url = f"{s3}/stores/cu-dft.zarr"
    keys = {"energy_key": "dft_energy", "forces_key": "dft_forces"}
    options = FeaturizeOptions(partition_atoms=PARTITION_ATOMS, client=isolated_cluster, **keys)
    featurize(url, store_url, _dset(), options)
    remote = open_store(store_url)
    assert remote.read_structures().equals(reference.read_structures())
    assert remote.attrs["config"]["ingest"]["energy_key"] == "dft_energy"


def _cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.Popen:
    full = dict(os.environ, **(env or {}))
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-m", "dparallel", *args],
        env=full,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _descriptors_file(folder: Path) -> Path:
    path = folder / "descriptors.yaml"
    path.write_text(yaml.safe_dump(DESCRIPTORS))
    return path


def test_a_second_writer_is_refused_in_one_line(s3, dataset, tmp_path):
    _, url = dataset
    store_url = f"{s3}/stores/busy.zarr"
    with StoreLease(store_url, command="the first writer"):
        out = _cli(
            "featurize", url, "-o", store_url, "--descriptors", str(_descriptors_file(tmp_path)),
            "--local", "1", "-q",
        ).communicate(timeout=300)[0]  # fmt: skip
    lines = [ln for ln in out.splitlines() if "being written by" in ln]
    assert len(lines) == 1 and "the first writer" in lines[0], out
    assert "Traceback" not in out


def test_client_killed_mid_run_resumes_to_an_equal_store(s3, dataset, reference, tmp_path):
    _, url = dataset
    store_url = f"{s3}/stores/killed.zarr"
    args = ["featurize", url, "-o", store_url, "--descriptors", str(_descriptors_file(tmp_path))]
    args += ["--local", "1", "--partition-atoms", str(PARTITION_ATOMS), "-q"]
    proc = _cli(*args, cwd=tmp_path)
    deadline = time.monotonic() + 240
    n_done = 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                n_done = len(open_store(store_url).done_partitions())
            except StoreError:
                n_done = 0
            if n_done >= 2:
                break
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the client and its local cluster, no clean-up
        proc.wait(30)
    total = open_store(store_url).n_partitions
    assert 2 <= n_done < total, f"the run must be interrupted part-way ({n_done}/{total})"
    out = _cli(*args, cwd=tmp_path).communicate(timeout=300)[0]
    assert "already done" in out and " 0 already done" not in out, out
    store = open_store(store_url)
    assert store.is_complete
    _assert_bitwise(reference, store)


def test_run_quickstart_on_s3_creates_nothing_local_but_the_model(s3, dataset, tmp_path):
    _, url = dataset
    work = tmp_path / "work"
    work.mkdir()
    cache = tmp_path / "cache"
    store_url = f"{s3}/stores/quickstart.zarr"
    out = _cli(
        "run", str(ROOT / "workflows" / "quickstart.yaml"),
        "--set", f"dataset.path={url}", "--set", f"store.path={store_url}",
        "--set", "output.model_dir=model", "--set", "training.epochs=2",
        "--set", "training.hidden=[8]", "--set", "partitioning.atoms=150", "--local", "1", "-q",
        cwd=work, env={"DPARALLEL_CACHE_DIR": str(cache)},
    ).communicate(timeout=600)[0]  # fmt: skip
    assert "stages: dataset skipped, featurize ran, train ran" in out, out
    assert sorted(os.listdir(work)) == ["model"], out
    assert (work / "model" / "model.pt").exists()
    assert open_store(store_url).is_complete
    fs, path = filesystem(f"{s3}/stores/quickstart.scaling.data")
    assert fs.exists(path)
