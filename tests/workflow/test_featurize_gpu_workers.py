"""GPU workers on a CPU machine: partitions marked for GPU go, through the Dask resource
``GPU``, to the workers that advertise it; without CUDA those compute on the CPU and the
store equals a CPU-only run bitwise."""

from __future__ import annotations

import numpy as np
import pytest

from dparallel.cluster import gpus
from dparallel.store import open_store
from dparallel.workflow.featurize import FeaturizeOptions, featurize, featurize_in_process

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _set():
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet

    acsf = ACSF.uniform(
        ["Cu"], r_cut=4.5, cutoff="cos", radial=[(0.5, 0.0), (1.0, 2.5)],
        narrow=[(0.02, 1.0, 1.0, 0.0)], wide=[(0.02, 2.0, -1.0, 0.0)],
    )  # fmt: skip
    return DescriptorSet(acsf=acsf, derivatives=True)


def _arrays(path) -> dict[str, np.ndarray]:
    store = open_store(path)
    out: dict[str, np.ndarray] = {}
    for p in range(store.n_partitions):
        for key, value in store.read_features(p, "acsf")["Cu"].items():
            out[f"{p}/{key}"] = np.asarray(value)
    return out


def test_gpu_marked_partitions_run_on_gpu_workers_and_equal_the_cpu_run(
    tmp_path, monkeypatch
) -> None:
    from distributed import Client, LocalCluster, Nanny

    from dparallel.datasets import write_emt_cu

    source = write_emt_cu(tmp_path / "cu.extxyz", n_structures=40, seed=7)
    reference = featurize_in_process(
        source, tmp_path / "cpu.zarr", _set(), FeaturizeOptions(partition_atoms=150)
    )
    spec = {"threads_per_worker": 1, "dashboard_address": "127.0.0.1:0"}
    with (
        LocalCluster(n_workers=1, **spec) as cluster,
        Client(cluster) as client,
    ):
        options = dict(cluster.new_spec["options"])
        options.update(resources={"GPU": 1}, env={"CUDA_VISIBLE_DEVICES": ""}, name="fake-gpu")
        cluster.worker_spec["fake-gpu"] = {"cls": Nanny, "options": options}
        gpus.start_specified_workers(cluster, timeout=120)
        gpu_pid = client.run(lambda: __import__("os").getpid(), workers=[
            a for a, w in client.scheduler_info()["workers"].items() if w["resources"]
        ])  # fmt: skip
        marks: list[set[int]] = []

        def mark_all_but_first(partitions, n_gpu, n_cpu, share=None):  # noqa: ANN001, ANN202
            assert (n_gpu, n_cpu) == (1, 1)
            marks.append(set(partitions[1:]))
            return marks[-1]

        monkeypatch.setattr(gpus, "gpu_partitions", mark_all_but_first)
        result = featurize(
            source,
            tmp_path / "gpu.zarr",
            _set(),
            FeaturizeOptions(partition_atoms=150, client=client),
        )
    store = result.store
    assert store.n_partitions == reference.n_partitions > 3
    reports = [store.report(p) for p in range(store.n_partitions)]
    on_gpu = {r["partition"] for r in reports if r["pid"] in gpu_pid.values()}
    assert marks and marks[0] <= on_gpu  # every marked partition ran on the GPU worker
    assert {r["device"] for r in reports} == {"cpu"}  # no CUDA there: on the CPU
    a, b = _arrays(reference.path), _arrays(store.path)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert store.attrs["statistics"] == open_store(reference.path).attrs["statistics"]


def test_a_gpu_worker_without_cuda_computes_on_the_cpu_and_says_so(monkeypatch, caplog) -> None:
    import torch

    from dparallel.workflow import featurize_task

    monkeypatch.setattr(gpus, "worker_gpus", lambda: 1.0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(featurize_task, "_said", set())
    with caplog.at_level("WARNING", logger=featurize_task.__name__):
        assert featurize_task.task_device() == "cpu"
    assert "GPU worker" in caplog.text and "on the CPU" in caplog.text
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert featurize_task.task_device() == "cuda"
    monkeypatch.setattr(gpus, "worker_gpus", lambda: 0.0)
    assert featurize_task.task_device() == "cpu"


def test_a_registered_device_engine_computes_the_task_and_none_falls_back(
    tmp_path, monkeypatch, caplog
) -> None:
    from dparallel.datasets import write_emt_cu
    from dparallel.io import open_source
    from dparallel.workflow import featurize_task
    from dparallel.workflow.featurize_task import task_descriptors

    batch = open_source(write_emt_cu(tmp_path / "cu.extxyz", n_structures=2, seed=3)).read(0, 2)
    dset = _set()
    cpu = task_descriptors(batch, dset)
    monkeypatch.setattr(featurize_task, "_said", set())
    monkeypatch.setattr(featurize_task, "DEVICE_ENGINES", {"never": lambda *a: None})
    with caplog.at_level("WARNING", logger=featurize_task.__name__):
        fallback = task_descriptors(batch, dset, device="cuda")
    assert "no featurize engine for acsf" in caplog.text
    for key, value in cpu["acsf"]["Cu"].items():
        np.testing.assert_array_equal(value, fallback["acsf"]["Cu"][key])
    seen: list[str] = []

    def engine(batch, dset, neighbors, device):  # noqa: ANN001, ANN202
        seen.append(device)
        return {"acsf": {}}

    monkeypatch.setattr(featurize_task, "DEVICE_ENGINES", {"fake": engine})
    assert task_descriptors(batch, dset, device="cuda") == {"acsf": {}}
    assert seen == ["cuda"]
