"""Training on a device: resolving it, data held on it or streamed, prefetching, errors."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from _callbacks import stop_after
from _store_fixture import assert_same_batches, batch_arrays, small_store

from dparallel.errors import ConfigError, DeviceError
from dparallel.train import TrainingSpec, parse_training_spec
from dparallel.train import train as train_model
from dparallel.train.batch import batch_to
from dparallel.train.data import BatchPlan, PartitionReader, iterate_batches
from dparallel.train.device import resolve_device
from dparallel.train.feed import HeldData, WaitClock, prefetched, timed
from dparallel.train.splits import build_split_index

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")

SPEC = TrainingSpec(
    epochs=3, hidden=(8,), batch_size=3, seed=7, lr=5e-3, shuffle_buffer=5, device="cpu"
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return small_store(tmp_path_factory.mktemp("device"), n=24)


@pytest.fixture(scope="module")
def reader(store) -> PartitionReader:  # noqa: ANN001
    index = build_split_index(store, 0.2, 0.2, 7)
    return PartitionReader(store, "acsf", ["Cu"], index, True)


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("dparallel-")}


# ----------------------------------------------------------------- the device setting
def test_device_setting_is_resolved_and_validated() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if CUDA else "cpu")
    assert parse_training_spec({"device": "cuda:1"}).device == "cuda:1"
    assert parse_training_spec({}, ["data_on_device=false"]).data_on_device is False
    assert parse_training_spec({}).data_on_device == "auto"
    assert parse_training_spec({}).batch_prefetch == "auto"
    assert parse_training_spec({}, ["batch_prefetch=3"]).batch_prefetch == 3
    with pytest.raises(ConfigError, match="batch_prefetch"):
        parse_training_spec({"batch_prefetch": -1})
    with pytest.raises(ConfigError, match="device"):
        parse_training_spec({"device": "gpu"})
    with pytest.raises(ConfigError, match="data_on_device"):
        parse_training_spec({"data_on_device": "sometimes"})


@pytest.mark.skipif(CUDA, reason="CUDA is present here")
def test_cuda_asked_for_but_absent_is_a_clear_error(store, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(DeviceError, match=r"'cuda:0' asked for.*available: cpu"):
        resolve_device("cuda:0")
    with pytest.raises(DeviceError, match="'cuda' asked for"):
        train_model(store, tmp_path / "m", SPEC.model_copy(update={"device": "cuda"}))


# ----------------------------------------------------------------- data on the device
def test_resident_batches_equal_streamed_batches(reader) -> None:  # noqa: ANN001
    resident = HeldData.load(reader, torch.device("cpu"), torch.float64, None)
    assert resident is not None and resident.nbytes > 0
    for split, shuffle in (("train", True), ("validation", False)):
        plans = [
            BatchPlan(reader.index, split, 4, shuffle=shuffle, seed=3, epoch=2, shuffle_buffer=5)
            for _ in range(2)
        ]  # one each: a shuffled plan draws its batches once
        assert_same_batches(
            list(iterate_batches(reader, plans[0])), list(resident.batches(plans[1]))
        )


def test_resident_data_past_its_budget_is_streamed(reader) -> None:  # noqa: ANN001
    assert HeldData.load(reader, torch.device("cpu"), torch.float64, budget=1000) is None


@pytest.mark.parametrize("batch_prefetch", [0, 2])
def test_data_held_and_streamed_train_the_same_model(store, tmp_path, batch_prefetch) -> None:  # noqa: ANN001
    # batch_prefetch 2: the batch prefetch thread (a GPU's streaming path) on the CPU too
    runs = {}
    for mode in (True, False):
        rows: list[dict] = []
        spec = SPEC.model_copy(update={"data_on_device": mode, "batch_prefetch": batch_prefetch})
        runs[mode] = (train_model(store, tmp_path / str(mode), spec, callback=rows.append), rows)
    (held, held_rows), (streamed, streamed_rows) = runs[True], runs[False]
    for ra, rb in zip(held.history, streamed.history, strict=True):
        for k in ra:
            if k not in ("seconds", "data_wait_fraction"):
                assert ra[k] == rb[k], k  # bitwise: same batches in the same order
    for k, v in held.model.state_dict().items():
        assert torch.equal(v, streamed.model.state_dict()[k]), k
    # the wait share is in every callback row and in metrics.json, with where data lived
    assert all(0.0 <= r["data_wait_fraction"] <= 1.0 for r in held_rows + streamed_rows)
    for mode, name in ((True, "True"), (False, "False")):
        doc = json.loads((tmp_path / name / "metrics.json").read_text())
        assert all("data_wait_fraction" in r for r in doc["epochs"])
        assert doc["device"]["device"] == "cpu"
        assert doc["device"]["data_on_device"] is mode
    assert not _threads()


def test_the_partition_cache_changes_the_reads_not_the_model(store, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """``DPARALLEL_TRAIN_CACHE_MB=0`` decodes every partition again each epoch; the batches,
    metrics and weights are those of the default cache, bit for bit."""
    from dparallel.train import data

    real, reads = data.load_partition, []

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        reads.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(data, "load_partition", counted)
    spec = SPEC.model_copy(update={"data_on_device": False})
    runs, counts = [], []
    for cache_mb in (None, "0"):
        if cache_mb is not None:
            monkeypatch.setenv("DPARALLEL_TRAIN_CACHE_MB", cache_mb)
        reads.clear()
        runs.append(train_model(store, tmp_path / str(cache_mb), spec))
        counts.append(len(reads))
    assert counts[1] > counts[0]  # the cache was on, then off
    cached, uncached = runs
    for ra, rb in zip(cached.history, uncached.history, strict=True):
        for k in ra:
            if k not in ("seconds", "data_wait_fraction"):
                assert ra[k] == rb[k], k
    for k, v in cached.model.state_dict().items():
        assert torch.equal(v, uncached.model.state_dict()[k]), k


def test_resume_across_data_placements_continues_the_same_trajectory(store, tmp_path) -> None:  # noqa: ANN001
    spec = SPEC.model_copy(update={"epochs": 4, "optimizer": "kalman"})
    straight = train_model(store, tmp_path / "a", spec.model_copy(update={"data_on_device": True}))
    train_model(store, tmp_path / "b", spec.model_copy(update={"data_on_device": False}),
                callback=stop_after(2))  # fmt: skip
    resumed = train_model(store, tmp_path / "b", spec.model_copy(update={"data_on_device": True}),
                          resume=True)  # fmt: skip
    for ra, rb in zip(straight.history, resumed.history, strict=True):
        assert ra["train_loss"] == rb["train_loss"] and ra["validation_loss"] == rb[
            "validation_loss"]  # fmt: skip
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k


# ----------------------------------------------------------------- the prefetch thread
def test_prefetcher_yields_every_batch_and_stops_its_thread(reader) -> None:  # noqa: ANN001
    source = list(
        iterate_batches(reader, BatchPlan(reader.index, "train", 3, shuffle=False), prefetch=0)
    )
    clock = WaitClock()
    got = list(timed(prefetched(iter(source), torch.device("cpu")), clock))
    assert [b.ids.tolist() for b in got] == [b.ids.tolist() for b in source]
    assert clock.seconds >= 0.0
    assert not _threads()
    # closed early (a step failed, a break): the thread ends too
    batches = iterate_batches(reader, BatchPlan(reader.index, "train", 2, shuffle=True))
    gen = timed(prefetched(batches, torch.device("cpu")), WaitClock())
    next(gen)
    gen.close()
    assert not _threads()
    # never iterated: no thread was started
    prefetched(iter(source), torch.device("cpu")).close()
    assert not _threads()


def test_an_error_in_the_loader_surfaces_in_the_training_thread(reader) -> None:  # noqa: ANN001
    def failing_after_one():  # noqa: ANN202
        it = iterate_batches(reader, BatchPlan(reader.index, "train", 3, shuffle=False), prefetch=0)
        yield next(it)
        raise OSError("disk went away")

    got = []
    with pytest.raises(OSError, match="disk went away"):
        for b in prefetched(failing_after_one(), torch.device("cpu")):
            got.append(b)
    assert len(got) == 1
    assert not _threads()


@pytest.mark.parametrize("batch_prefetch", [0, 2])
def test_an_error_in_the_store_read_surfaces_in_training(
    store, tmp_path, monkeypatch, batch_prefetch
) -> None:  # noqa: ANN001
    import dparallel.train.data as data

    real = data.load_partition
    calls = {"n": 0}

    def flaky(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls["n"] += 1
        if calls["n"] > 6:  # preparation and the first reads pass
            raise OSError("chunk unreadable")
        return real(*args, **kwargs)

    monkeypatch.setattr(data, "load_partition", flaky)
    monkeypatch.setenv("DPARALLEL_TRAIN_CACHE_MB", "0")
    spec = SPEC.model_copy(update={"data_on_device": False, "batch_prefetch": batch_prefetch})
    with pytest.raises(OSError, match="chunk unreadable"):
        train_model(store, tmp_path / "m", spec)
    assert not _threads()


# ----------------------------------------------------------------- out of memory
def test_out_of_memory_at_a_step_says_what_to_lower(store, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    import dparallel.train.optimizers as optimizers

    def oom(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity"
        )

    monkeypatch.setattr(optimizers, "predict_batch", oom)
    with pytest.raises(DeviceError) as info:
        train_model(store, tmp_path / "m", SPEC)
    text = str(info.value)
    assert "out of memory on cpu at a training step of epoch 0" in text
    assert "tried to allocate 2.50 GiB" in text
    assert "free of" in text and "structures" in text
    assert "batch_size" in text and "data_on_device=false" in text
    assert not _threads()


# ----------------------------------------------------------------- force-weight schedule
def test_force_weight_follows_the_learning_rate(store, tmp_path) -> None:  # noqa: ANN001
    spec = SPEC.model_copy(update={"force_weight_start": 1.0, "force_weight": 0.1})
    res = train_model(store, tmp_path / "m", spec)
    weights = [r["force_weight"] for r in res.history]
    lrs = [r["lr"] for r in res.history]
    assert weights[0] == pytest.approx(1.0)
    for w, lr in zip(weights, lrs, strict=True):
        assert w == pytest.approx(0.1 + 0.9 * lr / spec.lr)
    assert weights[-1] < weights[0]
    # without it the column is absent and the weight constant
    assert "force_weight" not in train_model(store, tmp_path / "n", SPEC).history[0]
    # data_on_device: auto streams on the CPU (as before: partition cache, numpy collation)
    doc = json.loads((tmp_path / "n" / "metrics.json").read_text())
    assert doc["device"] == {"device": "cpu", "data_on_device": False, "data_bytes": None,
                             "peak_memory_bytes": None}  # fmt: skip


# ----------------------------------------------------------------- CUDA
@needs_cuda
def test_cuda_training_matches_cpu_and_resumes_on_the_cpu(store, tmp_path) -> None:  # noqa: ANN001
    spec = SPEC.model_copy(update={"device": "cuda", "optimizer": "kalman", "epochs": 4})
    gpu = train_model(store, tmp_path / "g", spec)
    cpu = train_model(store, tmp_path / "c", spec.model_copy(update={"device": "cpu"}))
    for ra, rb in zip(gpu.history, cpu.history, strict=True):
        assert ra["train_loss"] == pytest.approx(rb["train_loss"], rel=1e-6)
    ck = torch.load(tmp_path / "g" / "checkpoint.pt", weights_only=True)
    assert all(v.device.type == "cpu" for v in ck["model"].values())
    train_model(store, tmp_path / "r", spec, callback=stop_after(2))
    resumed = train_model(store, tmp_path / "r", spec.model_copy(update={"device": "cpu"}),
                          resume=True)  # fmt: skip
    assert resumed.history[-1]["train_loss"] == pytest.approx(
        cpu.history[-1]["train_loss"], rel=1e-6)  # fmt: skip


@needs_cuda
def test_cuda_streamed_training_equals_held(store, tmp_path) -> None:  # noqa: ANN001
    """Streamed to the GPU (batches gathered into pinned memory on the gather threads,
    copied on a side stream) against the data held there: the same batches, one model."""
    spec = SPEC.model_copy(update={"device": "cuda", "epochs": 3})
    held = train_model(store, tmp_path / "h", spec.model_copy(update={"data_on_device": True}))
    streamed = train_model(store, tmp_path / "s", spec.model_copy(update={"data_on_device": False}))
    for ra, rb in zip(held.history, streamed.history, strict=True):
        assert ra["train_loss"] == pytest.approx(rb["train_loss"], rel=1e-9)
    assert not _threads()


@needs_cuda
def test_batches_move_to_cuda(reader) -> None:  # noqa: ANN001
    batch = next(iterate_batches(reader, BatchPlan(reader.index, "train", 3, shuffle=False)))
    moved = batch_to(batch, torch.device("cuda"))
    assert moved.energy.device.type == "cuda"
    assert all(a.shape == b.shape for a, b in zip(batch_arrays(batch), batch_arrays(moved),
                                                   strict=True))  # fmt: skip
