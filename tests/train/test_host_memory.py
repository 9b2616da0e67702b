"""The host-memory check of streamed training: silent on a store that fits, an error naming
what to lower on one that cannot, a warning near the limit; its estimate against the
partitions actually decoded."""

from __future__ import annotations

import logging

import pytest
import torch
from _store_fixture import small_store

import dparallel.train.host_memory as host_memory
from dparallel.errors import HostMemoryError, TrainingError
from dparallel.train import TrainingSpec, build_split_index, train
from dparallel.train.data import PartitionReader


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return small_store(tmp_path_factory.mktemp("data"), n=24)


def _reader(store, cache: int = 0) -> PartitionReader:  # noqa: ANN001
    index = build_split_index(store, 0.2, 0.1, seed=0)
    return PartitionReader(store, "acsf", ["Cu"], index, forces=True, cache_bytes=cache)


def _available(monkeypatch, free: int) -> None:  # noqa: ANN001
    monkeypatch.setattr(host_memory, "device_memory", lambda device: (free, 2 * free))


def test_the_estimate_bounds_the_decoded_partitions_from_below(store) -> None:  # noqa: ANN001
    """Its partition is the largest one decoded (within the spread of bytes per atom), and
    it counts no more partitions than the split has."""
    reader = _reader(store)
    spec = TrainingSpec(batch_size=4, shuffle_buffer=8)
    est = host_memory.estimate_host_memory(reader, spec, 0)
    decoded = max(reader.load(p).nbytes for p in reader.index.partitions)
    assert 0.8 * decoded <= est.partition <= 1.2 * decoded
    assert 1 <= est.partitions <= len(reader.index.partitions_with("train"))
    free = host_memory.device_memory(torch.device("cpu"))[0]
    assert est.available == free or abs(est.available - free) < 0.2 * free


def test_a_store_that_fits_passes_silently(store, caplog) -> None:  # noqa: ANN001
    with caplog.at_level(logging.WARNING):
        host_memory.check_host_memory(_reader(store), TrainingSpec(), 0)
    assert "host memory" not in caplog.text


def test_a_run_that_cannot_fit_is_refused_naming_what_to_lower(store, monkeypatch) -> None:  # noqa: ANN001
    reader = _reader(store)
    est = host_memory.estimate_host_memory(reader, TrainingSpec(), 0)
    _available(monkeypatch, est.total - 1)
    with pytest.raises(HostMemoryError) as info:
        host_memory.check_host_memory(reader, TrainingSpec(), 0)
    assert isinstance(info.value, TrainingError)
    for name in ("shuffle_buffer", "batch_size", "DPARALLEL_TRAIN_CACHE_MB", "--partition-atoms"):
        assert name in str(info.value)


def test_a_run_near_the_limit_is_warned(store, monkeypatch, caplog) -> None:  # noqa: ANN001
    reader = _reader(store)
    est = host_memory.estimate_host_memory(reader, TrainingSpec(), 0)
    _available(monkeypatch, int(est.total / 0.9))  # fits, above WARN_SHARE
    with caplog.at_level(logging.WARNING):
        host_memory.check_host_memory(reader, TrainingSpec(), 0)
    assert "may run out of host memory" in caplog.text


def test_a_cache_larger_than_the_memory_counts(store, monkeypatch) -> None:  # noqa: ANN001
    """A cache set above what is free (``DPARALLEL_TRAIN_CACHE_MB``) is refused when the
    store's data would fill it past the available memory."""
    reader = _reader(store)
    spec = TrainingSpec(shuffle_buffer=1, batch_size=1, prefetch=0)
    lean = host_memory.estimate_host_memory(reader, spec, 0)
    cached = host_memory.estimate_host_memory(reader, spec, 2**40)
    assert cached.partitions > lean.partitions
    _available(monkeypatch, (lean.total + cached.total) // 2)
    host_memory.check_host_memory(reader, spec, 0)
    with pytest.raises(HostMemoryError):
        host_memory.check_host_memory(reader, spec, 2**40)


def test_train_stops_before_the_first_epoch(store, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    _available(monkeypatch, 1)
    with pytest.raises(HostMemoryError, match="host memory is available"):
        train(store, tmp_path / "m", TrainingSpec(epochs=1, validation_fraction=0.2))
    assert not (tmp_path / "m" / "checkpoint.pt").exists()
