"""Featurization on real multi-process Dask clusters: correctness, determinism, faults, resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from _cu_descriptors import DESCRIPTORS

from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.errors import PartitionFailedError, StoreMismatchError
from dparallel.io import open_source
from dparallel.store import open_store
from dparallel.workflow.featurize import (
    FeaturizeOptions,
    featurize,
    write_scaling_data,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HERE = Path(__file__).resolve().parent


def _acsf() -> ACSF:
    spec = DESCRIPTORS["acsf"]
    return ACSF.uniform(
        elements=spec["elements"],
        r_cut=spec["r_cut"],
        cutoff=spec["cutoff"],
        radial=spec["radial"],
        narrow=spec["narrow"],
        wide=spec["wide"],
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from dparallel.datasets import write_emt_cu

    return write_emt_cu(tmp_path_factory.mktemp("data") / "cu.extxyz", n_structures=40, seed=7)


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
    )
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close(timeout=30)


def _descriptor_set() -> DescriptorSet:
    return DescriptorSet(acsf=_acsf(), derivatives=True)


def _global_features(store_path: Path) -> dict[str, np.ndarray]:
    """Every stored array re-indexed to the source's atom order (independent of partitioning)."""
    store = open_store(store_path)
    values, rows, derivs = [], [], []
    offset = 0
    for p in range(store.n_partitions):
        feats = store.read_features(p, "acsf")["Cu"]
        values.append(feats["values"])
        rows.append(feats["atom_index"] + offset)
        key = np.lexsort((feats["d/Cu/pair_second"], feats["d/Cu/pair_first"]))
        derivs.append((feats["d/Cu/pair_first"][key] + offset, feats["d/Cu/dG_dr"][key]))
        offset += store.read_partition(p).n_atoms
    order = np.argsort(np.concatenate(rows))
    return {
        "values": np.concatenate(values)[order],
        "pair_first": np.concatenate([d[0] for d in derivs]),
        "dG_dr": np.concatenate([d[1] for d in derivs]),
    }


@pytest.fixture(scope="module")
def reference(dataset, client, tmp_path_factory) -> Path:
    """An undisturbed run on two workers."""
    path = tmp_path_factory.mktemp("ref") / "ref.zarr"
    featurize(
        dataset, path, _descriptor_set(), FeaturizeOptions(partition_atoms=150, client=client)
    )
    return path


def test_values_and_statistics_match_in_process_acsf(dataset, reference):
    store = open_store(reference)
    info = store.info()
    assert info["complete"] and info["partitions_done"] == info["partitions_total"] > 3
    batch = open_source(dataset).read(0, 40)
    direct = _acsf().compute(batch, derivatives=True)["Cu"]
    stored = _global_features(reference)
    np.testing.assert_allclose(stored["values"], direct.values.numpy(), rtol=1e-12, atol=1e-14)
    assert stored["pair_first"].shape[0] == direct.pairs["Cu"].pair_first.shape[0]
    stats = store.attrs["statistics"]["acsf"]["Cu"]
    x = direct.values.numpy()
    assert stats["count"] == batch.n_atoms
    np.testing.assert_allclose(stats["mean"], x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(stats["sigma"], x.std(axis=0, ddof=1), rtol=1e-10)
    np.testing.assert_array_equal(stats["min"], x.min(axis=0))


def test_scaling_data_file(reference, tmp_path):
    path = tmp_path / "scaling.data"
    write_scaling_data(open_store(reference), path)
    rows = np.loadtxt(path, comments="#")
    stats = open_store(reference).attrs["statistics"]["acsf"]["Cu"]
    assert rows.shape == (len(stats["mean"]), 6)
    np.testing.assert_array_equal(rows[:, 1], np.arange(1, len(stats["mean"]) + 1))
    np.testing.assert_allclose(rows[:, 4], stats["mean"], rtol=1e-15)
    url = f"memory://scaling/{tmp_path.name}/feats.scaling.data"  # a URL: uploaded
    write_scaling_data(open_store(reference), url)
    import fsspec

    assert fsspec.open(url, "rb").open().read() == path.read_bytes()


def test_bitwise_independent_of_workers_and_partition_size(dataset, reference, tmp_path):
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address="127.0.0.1:0") as one,
        Client(one) as single,
    ):
        featurize(
            dataset,
            tmp_path / "one.zarr",
            _descriptor_set(),
            FeaturizeOptions(partition_atoms=400, client=single),
        )
    a, b = _global_features(reference), _global_features(tmp_path / "one.zarr")
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    sa = open_store(reference).attrs["statistics"]
    sb = open_store(tmp_path / "one.zarr").attrs["statistics"]
    assert sa == sb
    assert open_store(reference).n_partitions != open_store(tmp_path / "one.zarr").n_partitions


def test_worker_killed_mid_run_costs_only_a_retry(dataset, reference, client, tmp_path):
    path = tmp_path / "killed.zarr"
    errors: list[BaseException] = []

    def run() -> None:
        try:
            featurize(
                dataset,
                path,
                _descriptor_set(),
                FeaturizeOptions(partition_atoms=60, client=client),
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 120
    n_done = 0
    while time.monotonic() < deadline:
        if (path / "partitions" / "done").exists():
            n_done = len(open_store(path).done_partitions())
            if n_done >= 1:
                break
        time.sleep(0.02)
    pids = client.run(os.getpid)
    victim = sorted(pids.values())[0]
    os.kill(victim, signal.SIGKILL)
    assert 1 <= n_done < open_store(path).n_partitions, "the kill must land mid-run"
    thread.join(timeout=240)
    assert not thread.is_alive() and not errors, errors
    store = open_store(path)
    assert store.is_complete
    a, b = _global_features(reference), _global_features(path)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert store.attrs["statistics"] == open_store(reference).attrs["statistics"]


def test_partition_that_keeps_killing_workers_is_named_and_others_kept(
    dataset, tmp_path, monkeypatch
):
    import dask
    from distributed import Client, LocalCluster

    # One worker and no scheduler-side queueing: every task waiting on the worker dies with
    # it and becomes a suspect too; featurize must clear them by rerunning each alone.
    monkeypatch.setenv("DPARALLEL_TEST_POISON_PARTITION", "2")
    path = tmp_path / "poison.zarr"
    with (
        dask.config.set(
            {
                "distributed.scheduler.allowed-failures": 1,
                "distributed.scheduler.worker-saturation": "inf",
            }
        ),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            dashboard_address="127.0.0.1:0",
            preload=[str(HERE / "_poison_preload.py")],
        ) as cluster,
        Client(cluster) as client,
        pytest.raises(PartitionFailedError) as info,
    ):
        featurize(
            dataset, path, _descriptor_set(), FeaturizeOptions(partition_atoms=150, client=client)
        )
    store = open_store(path)
    start, stop = store.partition_range(2)
    message = str(info.value)
    assert f"partition 2 (structures {start}..{stop - 1}) failed: WorkerKilledError" in message
    assert "was not killed for memory by a nanny" in message  # os._exit: no nanny said so
    assert "if it was memory, give each worker more memory with --memory-limit" in message
    done = set(store.done_partitions().tolist())
    assert done == set(range(store.n_partitions)) - {2}


def test_partition_killed_for_memory_says_so_names_the_options_and_resumes(
    dataset, reference, client, tmp_path, monkeypatch
):
    """A partition whose worker its nanny kills past ``memory_limit`` was reported as
    Dask's bare KilledWorker text; now one PartitionFailedError names it, says memory and
    the options to change, keeps the rest, and the same call resumes."""
    import dask
    from distributed import Client, LocalCluster

    monkeypatch.setenv("DPARALLEL_TEST_HOG_PARTITION", "2")
    path = tmp_path / "hog.zarr"
    options = FeaturizeOptions(partition_atoms=150)
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 1}),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            memory_limit="1GiB",
            dashboard_address="127.0.0.1:0",
            preload=[str(HERE / "_memory_hog_preload.py")],
        ) as cluster,
        Client(cluster) as hogged,
        pytest.raises(PartitionFailedError) as info,
    ):
        featurize(dataset, path, _descriptor_set(), replace(options, client=hogged))
    store = open_store(path)
    start, stop = store.partition_range(2)
    first, *lines = str(info.value).split("\n")
    assert "the workers ran out of memory" in first
    assert "more memory with --memory-limit" in first and "smaller with --partition-atoms" in first
    done = len(open_store(path).done_partitions())
    # another size is another plan: the store is refused without --overwrite, which redoes
    # the done partitions (the message said a rerun of the same command would resume)
    assert (
        f"--partition-atoms and --overwrite (another size replans the store: it computes its "
        f"{done} done partitions again)" in first
    )
    assert lines == [
        f"partition 2 (structures {start}..{stop - 1}) failed: WorkerKilledError: its worker "
        "died on each of 2 attempts to run it " + lines[0].split("attempts to run it ", 1)[1]
    ]
    assert "killed by its nanny for memory" in lines[0] and "of its 1.00 GiB limit" in lines[0]
    assert set(store.done_partitions().tolist()) == set(range(store.n_partitions)) - {2}
    result = featurize(dataset, path, _descriptor_set(), replace(options, client=client))
    assert (result.partitions_computed, result.partitions_already_done) == (
        1,
        store.n_partitions - 1,
    )
    a, b = _global_features(reference), _global_features(path)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parents[1]), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-m", "dparallel", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **kwargs,
    )


def test_client_killed_mid_run_then_resume(dataset, reference, tmp_path):
    descriptors = tmp_path / "descriptors.yaml"
    descriptors.write_text(yaml.safe_dump(DESCRIPTORS))
    path = tmp_path / "resumed.zarr"
    args = ["featurize", str(dataset), "-o", str(path), "--descriptors", str(descriptors)]
    args += ["--local", "1", "--partition-atoms", "30", "-q"]
    proc = _cli(*args)
    deadline = time.monotonic() + 180
    n_done = 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if (path / "partitions" / "done").exists():
                n_done = len(open_store(path).done_partitions())
                if n_done >= 2:
                    break
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the client and its local cluster, no clean-up
        proc.wait(30)
    total = open_store(path).n_partitions
    assert 2 <= n_done < total, "the run must be interrupted part-way"
    out = _cli(*args).communicate(timeout=300)[0]
    assert "already done" in out and " 0 already done" not in out, out
    store = open_store(path)
    assert store.is_complete
    a, b = _global_features(reference), _global_features(path)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_other_config_is_refused_unless_overwrite(dataset, reference):
    other = DescriptorSet(acsf=_acsf(), derivatives=False)
    with pytest.raises(StoreMismatchError, match="another source or config"):
        featurize(dataset, reference, other, FeaturizeOptions(partition_atoms=150, client=object()))


def test_label_keys_give_the_store_of_the_file_with_the_labels_renamed(
    dataset, reference, client, tmp_path
):
    """The reference store is featurized from the file whose labels are under energy /
    forces; the same file with them under dft_energy / dft_forces, read with those keys by
    the workers (the keys travel with the pickled source), gives the same structures,
    labels and features. Resuming that store with other keys is refused (its config
    records them)."""
    text = dataset.read_text()
    renamed = tmp_path / "dft.extxyz"
    renamed.write_text(
        text.replace(" energy=", " dft_energy=").replace(":forces:R:3", ":dft_forces:R:3")
    )
    assert renamed.read_text() != text
    keys = {"energy_key": "dft_energy", "forces_key": "dft_forces"}
    out = tmp_path / "dft.zarr"
    options = FeaturizeOptions(partition_atoms=150, client=client, **keys)
    featurize(renamed, out, _descriptor_set(), options)
    ours, theirs = open_store(out), open_store(reference)
    batch = ours.read_structures()
    assert batch.equals(theirs.read_structures())
    assert np.isfinite(batch.energy).all() and np.isfinite(batch.forces).all()
    for name, value in _global_features(reference).items():
        np.testing.assert_array_equal(_global_features(out)[name], value)
    assert ours.attrs["config"]["features"] == theirs.attrs["config"]["features"]
    without = FeaturizeOptions(partition_atoms=150, client=object())
    with pytest.raises(StoreMismatchError, match=r"ingest\.energy_key, ingest\.forces_key"):
        featurize(renamed, out, _descriptor_set(), without)


def test_command_line_scheduler_and_workers(dataset, reference, tmp_path):
    from daskprocs import start_scheduler, start_worker, stop

    scheduler, address = start_scheduler(tmp_path, "--preload", "dparallel.dashboard")
    workers = []
    try:
        workers = [start_worker(address, tmp_path / f"worker{k}.log") for k in range(2)]
        descriptors = tmp_path / "descriptors.yaml"
        descriptors.write_text(yaml.safe_dump(DESCRIPTORS))
        out = _cli(
            "featurize", str(dataset), "-o", str(tmp_path / "cli.zarr"), "--descriptors",
            str(descriptors), "--scheduler", address, "--partition-atoms", "150", "-q",
        ).communicate(timeout=300)[0]  # fmt: skip
        assert "0 already done" in out, out
    finally:
        for proc in workers:
            stop(proc)
        stop(scheduler)
    a, b = _global_features(reference), _global_features(tmp_path / "cli.zarr")
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def _counted_worker(address: str, tmp_path: Path, name: str, sleep: float = 1.5):
    """A ``dask worker`` whose tasks log each computation and then wait ``sleep`` s."""
    from daskprocs import child_env, start_worker

    env = child_env({
        "DPARALLEL_TEST_COMPUTED": str(tmp_path / "computed.txt"),
        "DPARALLEL_TEST_TASK_SLEEP": str(sleep),
    })  # fmt: skip
    preload = str(HERE / "_counting_preload.py")
    return start_worker(address, tmp_path / f"{name}.log", "--preload", preload, env=env)


def _computations(tmp_path: Path) -> list[tuple[int, int]]:
    """(worker pid, first structure) of each partition computed so far."""
    path = tmp_path / "computed.txt"
    text = path.read_text() if path.exists() else ""
    return [(int(a), int(b)) for a, b in (line.split() for line in text.splitlines())]


def _wait_for(what, timeout: float = 120) -> None:  # noqa: ANN001 - a predicate
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_worker_killed_late_costs_its_task_not_its_done_partitions(dataset, reference, tmp_path):
    """``dask worker`` SIGKILLed (nanny too: it does not come back) after it completed
    partitions: the run holds every result until it ends, so Dask recomputed each one the
    dead worker held, before the partitions still to do; now such a task finds its
    partition done in the store and returns the recorded report, computing nothing."""
    from daskprocs import start_scheduler, stop

    scheduler, address = start_scheduler(tmp_path)
    workers = [_counted_worker(address, tmp_path, f"w{k}") for k in range(3)]
    errors: list[BaseException] = []

    def run() -> None:
        try:
            options = FeaturizeOptions(partition_atoms=60, scheduler=address)
            featurize(dataset, tmp_path / "s.zarr", _descriptor_set(), options)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=run)
    try:
        thread.start()

        def victim() -> int | None:  # a worker process that computed two partitions
            pids = [pid for pid, _ in _computations(tmp_path)]
            return next((pid for pid in pids if pids.count(pid) >= 2), None)

        _wait_for(lambda: victim() is not None)
        pid = victim()
        assert pid is not None
        os.killpg(os.getpgid(pid), signal.SIGKILL)  # the worker and its nanny
        thread.join(timeout=300)
    finally:
        for proc in workers:
            stop(proc)
        stop(scheduler)
    assert not thread.is_alive() and not errors, errors
    store = open_store(tmp_path / "s.zarr")
    assert store.is_complete
    firsts = [first for _, first in _computations(tmp_path)]
    twice = {first for first in firsts if firsts.count(first) > 1}
    assert len(twice) <= 1, twice  # at most the task the kill interrupted
    a, b = _global_features(reference), _global_features(tmp_path / "s.zarr")
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_workers_that_join_late_and_one_retired_mid_run_give_the_same_store(
    dataset, reference, tmp_path
):
    """``featurize --scheduler`` on a scheduler with no worker says that it waits; workers
    that join one after another take its partitions with the run's torch threads, and one
    retired mid-run (``retire_workers``: its results move, a task it runs is rerun) costs
    at most that task: the store is a fixed cluster's, bitwise."""
    from daskprocs import start_scheduler, stop
    from distributed import Client

    scheduler, address = start_scheduler(tmp_path, "--preload", "dparallel.dashboard")
    workers, lines = [], []
    descriptors = tmp_path / "descriptors.yaml"
    descriptors.write_text(yaml.safe_dump(DESCRIPTORS))
    run = _cli(
        "featurize", str(dataset), "-o", str(tmp_path / "s.zarr"), "--descriptors",
        str(descriptors), "--scheduler", address, "--partition-atoms", "60",
        "--torch-threads", "2",
    )  # fmt: skip
    reader = threading.Thread(target=lambda: lines.extend(run.stdout), daemon=True)
    reader.start()
    try:
        _wait_for(lambda: any("has no worker" in line for line in lines), timeout=120)
        workers.append(_counted_worker(address, tmp_path, "first"))
        _wait_for(lambda: len(_computations(tmp_path)) >= 1)
        workers += [_counted_worker(address, tmp_path, f"late{k}") for k in range(2)]
        with Client(address, timeout=30) as client:
            client.wait_for_workers(3, timeout=120)
            first = _computations(tmp_path)[0][0]
            (retired,) = [a for a, pid in client.run(os.getpid).items() if pid == first]
            client.retire_workers([retired])
        run.wait(timeout=300)
        reader.join(timeout=10)
    finally:
        stop(run)
        for proc in workers:
            stop(proc)
        stop(scheduler)
    text = "".join(lines)
    assert run.returncode == 0 and "0 already done" in text, text
    assert "waits up to 120 s for one to join" in text, text
    store = open_store(tmp_path / "s.zarr")
    reports = [store.report(p) for p in range(store.n_partitions)]
    assert {r["torch_threads"] for r in reports} == {2}
    assert len({r["pid"] for r in reports} - {first}) >= 2  # the late workers computed too
    firsts = [start for _, start in _computations(tmp_path)]
    assert len({start for start in firsts if firsts.count(start) > 1}) <= 1
    a, b = _global_features(reference), _global_features(tmp_path / "s.zarr")
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_the_progress_page_counts_every_partition_whose_worker_dropped_its_events(
    dataset, tmp_path
):
    """A worker drops the events its tasks log while its connection closes (retired or
    scaled down mid-run): the page then read 19 of 20 partitions, not complete, after the
    run finished; the driver publishes each partition's report as it gets it."""
    import json

    from daskprocs import http_get, start_scheduler, start_worker, stop

    scheduler, address = start_scheduler(tmp_path, "--preload", "dparallel.dashboard")
    port = json.loads((tmp_path / "scheduler.json").read_text())["services"]["dashboard"]
    preload = str(HERE / "_silent_events_preload.py")
    worker = start_worker(address, tmp_path / "worker.log", "--preload", preload)
    try:
        options = FeaturizeOptions(partition_atoms=150, scheduler=address)
        result = featurize(dataset, tmp_path / "s.zarr", _descriptor_set(), options)
        progress = json.loads(http_get(f"http://127.0.0.1:{port}/dparallel/status.json")[1])
    finally:
        stop(worker)
        stop(scheduler)
    progress = progress["progress"]
    n = result.partitions_computed
    assert (progress["partitions_done"], progress["partitions_total"]) == (n, n), progress
    assert progress["complete"] and progress["structures_done"] == result.n_structures == 40
    (name,) = progress["workers"]  # the task's worker, not the driver that published
    assert name.startswith("tcp://127.0.0.1:") and progress["workers"][name]["partitions"] == n


def test_derived_size_on_a_cluster_it_does_not_start_counts_its_workers(
    dataset, reference, client, tmp_path
):
    """`dparallel featurize --scheduler ADDR` (a connection in flight) derives the partition
    size from the cluster's workers, as `dparallel run` (its client) does: not the maximum,
    which left all but one of these two workers idle."""
    from dparallel.cluster import connect_in_background

    address = client.scheduler.address
    given = featurize(
        dataset, tmp_path / "client.zarr", _descriptor_set(), FeaturizeOptions(client=client)
    )
    connecting = connect_in_background(scheduler=address)
    options = FeaturizeOptions(scheduler=address, connecting=connecting)
    result = featurize(dataset, tmp_path / "address.zarr", _descriptor_set(), options)
    assert given.store.n_partitions == 2  # one per worker: this data has < 5,000 atoms each
    assert result.store.n_partitions == given.store.n_partitions
    a, b = _global_features(reference), _global_features(tmp_path / "address.zarr")
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_a_complete_store_needs_no_reachable_scheduler_to_say_nothing_is_left(dataset, tmp_path):
    """Counting the workers of a cluster the run does not start waited for its
    connection before the store was read: a rerun of a complete store failed on an
    unreachable scheduler, where it had said there was nothing to do."""
    from dparallel.cluster import connect_in_background
    from dparallel.workflow.featurize import featurize_in_process

    featurize_in_process(dataset, tmp_path / "s.zarr", _descriptor_set(), FeaturizeOptions())
    address = "tcp://127.0.0.1:9"  # nothing listens there
    options = FeaturizeOptions(
        scheduler=address, connecting=connect_in_background(scheduler=address)
    )
    result = featurize(dataset, tmp_path / "s.zarr", _descriptor_set(), options)
    assert result.partitions_computed == 0 and result.partitions_already_done >= 1


def test_a_bad_worker_wait_is_refused_before_the_store_is_made(dataset, tmp_path, monkeypatch):
    """DPARALLEL_WORKER_WAIT was first read while the run waited for a worker, after its
    store was made and its tasks submitted."""
    from dparallel.errors import ConfigError

    monkeypatch.setenv("DPARALLEL_WORKER_WAIT", "soon")
    options = FeaturizeOptions(scheduler="tcp://127.0.0.1:9")
    with pytest.raises(ConfigError, match="DPARALLEL_WORKER_WAIT='soon'"):
        featurize(dataset, tmp_path / "s.zarr", _descriptor_set(), options)
    assert not (tmp_path / "s.zarr").exists()
