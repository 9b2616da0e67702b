"""Splits, streaming loader (exactly once per epoch, determinism) and mini-batch contents."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from _store_fixture import small_acsf, small_store

from dparallel.train import (
    BatchPlan,
    TrainingSpec,
    assemble,
    build_split_index,
    iterate_batches,
    make_batch,
)
from dparallel.train.data import PartitionReader, load_partition
from dparallel.train.splits import assign_splits


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return small_store(tmp_path_factory.mktemp("data"), n=24)


def test_loader_visits_every_training_structure_exactly_once(store) -> None:  # noqa: ANN001
    assert store.n_partitions >= 4
    index = build_split_index(store, 0.2, 0.2, seed=1)
    reader = PartitionReader(store, "acsf", ["Cu"], index, forces=True)
    expected = index.ids_of("train")
    assert 0 < expected.size < 24
    orders = []

    def ids(split: str, size: int, **shuffled: int) -> np.ndarray:
        plan = BatchPlan(reader.index, split, size, shuffle=bool(shuffled), **shuffled)
        return np.concatenate([b.ids for b in iterate_batches(reader, plan)])

    for epoch in range(3):
        got = ids("train", 3, seed=1, epoch=epoch, shuffle_buffer=4)
        assert np.array_equal(np.sort(got), expected)  # each exactly once
        orders.append(got)
    assert not np.array_equal(orders[0], orders[1])  # reshuffled per epoch
    again = ids("train", 3, seed=1, epoch=1, shuffle_buffer=4)
    assert np.array_equal(again, orders[1])  # same (seed, epoch) → same order
    for split in ("validation", "test"):
        got = ids(split, 5)
        assert np.array_equal(np.sort(got), index.ids_of(split))


def test_batch_matches_descriptors_computed_directly(store) -> None:  # noqa: ANN001
    """Re-indexed mini-batch == ACSF computed from scratch on the same structures."""
    index = build_split_index(store, 0.0, 0.0, seed=0)
    parts = [load_partition(store, p, "acsf", ["Cu"], index, True) for p in (2, 0)]
    items = [(parts[0], 1), (parts[1], 0), (parts[0], 0)]
    batch = make_batch(assemble(items), ["Cu"], torch.float64)
    order = ((2, 1), (2, 0), (0, 0))  # assemble groups items by partition, first-seen order
    structures = [store.read_partition(p).select(s, s + 1) for p, s in order]
    assert np.array_equal(batch.ids, [index.ids[p][s] for p, s in order])
    from dparallel.types import StructureBatch

    ref_batch = StructureBatch.concatenate(structures)
    ref = small_acsf().compute(ref_batch, derivatives=True)["Cu"]
    assert batch.features is not None and batch.geometry is None
    got = batch.features["Cu"]
    assert torch.allclose(got.values, ref.values, atol=1e-12)
    assert torch.equal(got.atom_index, ref.atom_index)
    assert np.allclose(batch.energy.numpy(), ref_batch.energy)
    assert np.allclose(batch.forces.numpy(), ref_batch.forces)
    assert np.array_equal(batch.structure_index.numpy(), ref_batch.structure_index)

    def key(pd):  # noqa: ANN001, ANN202
        order = np.lexsort((pd.vectors[:, 0].numpy(), pd.pair_second.numpy(),
                            pd.pair_first.numpy()))  # fmt: skip
        return pd.pair_first[order], pd.pair_second[order], pd.center[order], pd.dG_dr[order]

    got_k, ref_k = key(got.pairs["Cu"]), key(ref.pairs["Cu"])
    for a, b in zip(got_k[:3], ref_k[:3], strict=True):
        assert torch.equal(a, b)
    # dG/dr is stored in float32 (docs/store-format.md): equal within its rounding
    scale = ref_k[3].abs().amax(dim=-1, keepdim=True)  # per pair and column
    assert torch.all((got_k[3] - ref_k[3]).abs() <= 4 * torch.finfo(torch.float32).eps * scale)


def test_training_spec_rejects_unknown_keys_and_bad_values() -> None:
    from dparallel.errors import ConfigError
    from dparallel.train import parse_training_spec

    with pytest.raises(ConfigError, match="learning_rate"):
        parse_training_spec({"learning_rate": 1e-3})
    with pytest.raises(ConfigError, match="validation_fraction"):
        parse_training_spec(None, ["validation_fraction=0.6", "test_fraction=0.5"])
    with pytest.raises(ConfigError, match=r"key\.path=value"):
        parse_training_spec(None, ["epochs"])
    with pytest.raises(ConfigError, match=r"lr_min \(1\) exceeds lr \(0\.003\): the cosine"):
        parse_training_spec(None, ["lr=3e-3", "lr_min=1"])
    assert parse_training_spec(None, ["lr=3e-3", "lr_min=1", "schedule=none"]).lr_min == 1
    small = parse_training_spec(None, ["lr=1e-5"])  # under the default floor: its ratio kept
    assert small.lr_min == pytest.approx(1e-5 / 60) and TrainingSpec(**small.to_dict()) == small
    spec = parse_training_spec(None, ["hidden=[8, 4]", "lr=1e-3", "scaling=minmax"])
    assert spec.hidden == (8, 4) and spec.lr == 1e-3 and spec.scaling == "minmax"
    assert TrainingSpec(**spec.to_dict()) == spec


def test_loader_memory_is_bounded_by_buffer_and_prefetch(tmp_path) -> None:  # noqa: ANN001
    """Without a cache, only O(buffer + prefetch) partitions are alive at any time."""
    import gc
    import weakref

    st = small_store(tmp_path, n=24, partition_atoms=60)  # ~2 structures per partition
    assert st.n_partitions >= 10
    index = build_split_index(st, 0.0, 0.0, seed=0)
    reader = PartitionReader(st, "acsf", ["Cu"], index, forces=True, cache_bytes=0)
    alive: weakref.WeakSet = weakref.WeakSet()
    get = reader.get

    def tracked(p: int):  # noqa: ANN202
        data = get(p)
        alive.add(data)
        return data

    reader.get = tracked  # type: ignore[method-assign]
    peak, seen = 0, 0
    for batch in iterate_batches(
        reader, BatchPlan(reader.index, "train", 1, shuffle=True, shuffle_buffer=2), prefetch=1
    ):
        seen += batch.n_structures
        del batch
        gc.collect(0)  # partitions have no reference cycles; young generation suffices
        peak = max(peak, len(alive))
    assert seen == 24
    # leftover buffer items (< 2: one partition) + current partition + one read ahead
    assert peak <= 3


def test_streamed_partitions_in_order_hold_one_ahead(store) -> None:  # noqa: ANN001
    """Unshuffled, with prefetch 1: the partition batched and the one read ahead (counted
    from the start of its read), not the one dropped or a second one ahead; and the batch
    yielded before is not held while the next is assembled."""
    import gc
    import threading
    import time
    import weakref

    index = build_split_index(store, 0.0, 0.0, seed=0)
    assert len(index.partitions) >= 4
    reader = PartitionReader(store, "acsf", ["Cu"], index, forces=True, cache_bytes=0)
    live, lock = [0, 0], threading.Lock()
    load, assemble_batch = reader.load, reader.batch

    def gone() -> None:
        with lock:
            live[0] -= 1

    def counted(p: int):  # noqa: ANN202
        with lock:
            live[0] += 1
            live[1] = max(live[1], live[0])
        data = load(p)
        weakref.finalize(data, gone)
        time.sleep(0.02)
        return data

    previous: list[weakref.ref] = []

    def batch(items, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        gc.collect(0)
        assert all(ref() is None for ref in previous), "the previous batch is still held"
        out = assemble_batch(items, *args, **kwargs)
        previous[:] = [weakref.ref(out)]
        return out

    reader.load = counted  # type: ignore[method-assign]
    reader.batch = batch  # type: ignore[method-assign]
    plan = BatchPlan(index, "train", 4, shuffle=False)
    n = 0
    for b in iterate_batches(reader, plan, prefetch=1):
        n += b.n_structures
        del b
        gc.collect(0)
    assert n == index.count("train")
    assert live[1] <= 2


def test_a_dropped_partition_is_trimmed_unless_cached(store, monkeypatch) -> None:  # noqa: ANN001
    """Streamed without a cache, each partition dropped gives its heap back (malloc_trim);
    one the cache keeps does not."""
    import dparallel.train.data as data_module

    index = build_split_index(store, 0.0, 0.0, seed=0)
    for cache, expected in ((0, len(index.partitions)), (2**40, 0)):
        calls: list[int] = []
        monkeypatch.setattr(data_module, "trim_heap", lambda c=calls: c.append(1))
        reader = PartitionReader(store, "acsf", ["Cu"], index, forces=True, cache_bytes=cache)
        for _ in iterate_batches(reader, BatchPlan(index, "train", 4, shuffle=True)):
            pass
        assert len(calls) == expected


def test_an_element_with_no_training_atoms_is_refused_before_training(tmp_path) -> None:  # noqa: ANN001
    """Descriptors that list an element the data lacks (an n2p2 input.nn reused for a
    subset): refused before the first epoch, naming the element, not trained into a
    non-finite scaling that fails only when the model is written."""
    from _store_fixture import build_store

    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import ACSF
    from dparallel.errors import TrainingError
    from dparallel.train import train

    data = write_emt_cu(tmp_path / "cu.xyz", 8, seed=1)
    acsf = ACSF.uniform(["Cu", "Ag"], r_cut=4.0, radial=[(0.05, 0.0)], narrow=[])
    store = build_store(data, tmp_path / "s.zarr", acsf, derivatives=False)
    spec = TrainingSpec(epochs=2, hidden=(4,), force_weight=0.0, batch_size=4)
    with pytest.raises(TrainingError, match=r"no atom of Ag in the training split") as info:
        train(store, tmp_path / "model", spec)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "model" / "metrics.csv").exists()  # no epoch ran


def test_a_descriptor_the_store_lacks_names_what_it_holds(store, tmp_path) -> None:  # noqa: ANN001
    """The message said "featurize the store first" of a featurized store: the wrong fix."""
    from dparallel.errors import TrainingError
    from dparallel.train import train

    spec = TrainingSpec(epochs=1, descriptor="neighbor_sum", force_weight=0.0)
    with pytest.raises(TrainingError) as info:
        train(store, tmp_path / "model", spec)
    assert str(info.value) == (
        f"{store.target} was featurized without 'neighbor_sum' (it holds acsf): train with "
        "descriptor: acsf, or featurize again with a neighbor_sum section"
    )


def test_force_weight_start_needs_a_schedule_that_lowers_the_learning_rate() -> None:
    """With ``schedule: none`` the weight stayed at the start value the whole run."""
    from dparallel.errors import ConfigError
    from dparallel.train import parse_training_spec

    with pytest.raises(ConfigError, match=r"force_weight_start follows .*schedule: none keeps"):
        parse_training_spec(None, ["force_weight_start=3", "schedule=none"])
    for ok in (["schedule=cosine"], ["schedule=plateau"]):
        assert parse_training_spec(None, ["force_weight_start=3", *ok]).force_weight_start == 3


@pytest.mark.parametrize("schedule", ["none", "cosine"])
def test_force_weight_start_is_refused_with_kalman(schedule: str) -> None:
    """The Kalman update weighs forces by ``force_weight`` alone: the start was ignored."""
    from dparallel.errors import ConfigError
    from dparallel.train import parse_training_spec

    with pytest.raises(ConfigError, match=r"force_weight_start .*Kalman"):
        parse_training_spec(
            None, ["force_weight_start=3", "optimizer=kalman", f"schedule={schedule}"]
        )


def test_an_incomplete_store_splits_its_structures_as_the_complete_store(tmp_path) -> None:  # noqa: ANN001
    """Ids are the stored source indices, done partitions only: the split of a structure
    does not change as more partitions land (metrics.json's test_ids are source indices)."""
    import ase.io

    from dparallel.io import open_source
    from dparallel.io.synthetic import random_structures
    from dparallel.store import open_store
    from dparallel.workflow.ingest import IngestOptions, ingest_partition, prepare_ingest

    frames = random_structures(40, np.random.default_rng(0), max_atoms=5)
    ase.io.write(tmp_path / "data.xyz", frames, format="extxyz")
    src = open_source(tmp_path / "data.xyz")
    store = prepare_ingest(src, tmp_path / "s.zarr", IngestOptions(partition_atoms=40))
    assert store.n_partitions >= 3
    missing = store.n_partitions // 2  # a partition in the middle lands last
    for p in range(store.n_partitions):
        if p != missing:
            ingest_partition(src, store, p)
    part = build_split_index(open_store(tmp_path / "s.zarr"), 0.2, 0.2, seed=3)
    ingest_partition(src, store, missing)
    whole = build_split_index(open_store(tmp_path / "s.zarr"), 0.2, 0.2, seed=3)
    assert missing not in part.partitions and whole.partitions == list(range(store.n_partitions))
    for p in part.partitions:
        a, b = store.partition_range(p)
        np.testing.assert_array_equal(part.ids[p], np.arange(a, b))  # the source indices
        np.testing.assert_array_equal(part.split[p], whole.split[p])
    tags = np.full(40, "", dtype=object)
    reference = assign_splits(np.arange(40), tags, 0.2, 0.2, seed=3)  # by source index
    for name, code in (("train", 0), ("validation", 1), ("test", 2)):
        want = np.flatnonzero(reference == code)
        np.testing.assert_array_equal(whole.ids_of(name), want)
        a, b = store.partition_range(missing)
        np.testing.assert_array_equal(part.ids_of(name), want[(want < a) | (want >= b)])


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["optimizer=kalman", "weight_decay=0.1"], ["weight_decay (0.1)"]),
        (["optimizer=kalman", "lr=0.5", "schedule=plateau"], ["lr (0.5)", "schedule ('plateau')"]),
        (["optimizer=kalman", "plateau_patience=3"], ["plateau_patience (3)"]),
        (["optimizer=adam", "kalman_q0=0.5"], ["kalman_q0 (0.5)"]),
        (["optimizer=adamw", "kalman_force_components=1"], ["kalman_force_components (1)"]),
    ],
)
def test_optimizer_keys_the_chosen_optimizer_ignores_are_refused(
    overrides: list[str], named: list[str]
) -> None:
    """A key the chosen optimizer does not read was accepted and silently ignored."""
    from dparallel.errors import ConfigError
    from dparallel.train import parse_training_spec

    with pytest.raises(ConfigError) as caught:
        parse_training_spec(None, overrides)
    message = str(caught.value)
    name = overrides[0].partition("=")[2]
    assert all(key in message for key in named), message
    assert f"(optimizer: {name}), which would ignore" in message, message


def test_optimizer_keys_written_at_their_defaults_are_kept() -> None:
    """A config that writes every key out (a stored spec.json) still parses."""
    from dparallel.train import TrainingSpec, parse_training_spec

    for name in ("adam", "adamw", "kalman"):
        written = TrainingSpec(optimizer=name).to_dict()
        assert parse_training_spec(written).optimizer == name
        assert parse_training_spec(None, [f"optimizer={name}", "lr=0.003"]).optimizer == name


def test_an_unknown_optimizer_lists_the_known_ones() -> None:
    from dparallel.errors import ConfigError
    from dparallel.train import parse_training_spec

    with pytest.raises(
        ConfigError, match=r"unknown optimizer 'sgd': choose one of adam, adamw, kalman"
    ):
        parse_training_spec(None, ["optimizer=sgd"])


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("center past the rows", r"center out of \[0, "),
        ("center of another atom", "center row is not its first atom's"),
        ("negative neighbour", r"pair_second out of \[0, "),
        ("values short of atom_index", "rows {'atom_index': "),
        ("dG_dr short of the pairs", "rows {'pair_first': "),
    ],
)
def test_a_partition_whose_rows_do_not_fit_is_refused(store, monkeypatch, damage, message) -> None:  # noqa: ANN001
    """Batch assembly gathers with numpy's take(mode="clip"), no bounds checks: an index
    column of a damaged or foreign store out of range (a centre row past the values) was
    clamped to the last row, silently; one pointing at another atom's row gave that atom's
    features. Loading the partition checks every index column and row count."""
    from dparallel.errors import TrainingError

    index = build_split_index(store, 0.0, 0.0, seed=0)
    real = store.read_features

    def damaged(p: int, descriptor: str, derivatives: bool = True) -> dict:
        arr = real(p, descriptor, derivatives)["Cu"]
        center, second = arr["d/Cu/center"].copy(), arr["d/Cu/pair_second"].copy()
        if damage == "center past the rows":
            center[-1] = arr["values"].shape[0]
        elif damage == "center of another atom":  # the next centre atom's row
            center[0] = center[np.flatnonzero(center != center[0])[0]]
        elif damage == "negative neighbour":
            second[-1] = -1  # numpy would read it as the last atom
        elif damage == "values short of atom_index":
            arr["values"] = arr["values"][:-1]
        else:
            arr["d/Cu/dG_dr"] = arr["d/Cu/dG_dr"][:-1]
        arr["d/Cu/center"], arr["d/Cu/pair_second"] = center, second
        return {"Cu": arr}

    assert load_partition(store, 0, "acsf", ["Cu"], index, True).n_structures  # undamaged
    monkeypatch.setattr(store, "read_features", damaged)
    with pytest.raises(TrainingError, match=message) as info:
        load_partition(store, 0, "acsf", ["Cu"], index, True)
    assert "partition 0" in str(info.value) and "--overwrite" in str(info.value)


def test_a_store_whose_structures_were_all_skipped_says_so(tmp_path) -> None:  # noqa: ANN001
    """It said "the training split is empty (validation_fraction 0.1 and test_fraction 0.1
    of 0 structures leave none): lower them, or add structures"."""
    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.errors import TrainingError
    from dparallel.train import train
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = write_emt_cu(tmp_path / "cu.xyz", 3, seed=1)
    acsf = ACSF.uniform(["Ag"], r_cut=4.0, radial=[(0.05, 0.0)], narrow=[])  # no Cu
    options = FeaturizeOptions(partition_atoms=300, on_error="skip")
    store = featurize_in_process(data, tmp_path / "s.zarr", DescriptorSet(acsf=acsf), options)
    spec = TrainingSpec(epochs=2, hidden=(4,), force_weight=0.0, batch_size=4)
    with pytest.raises(TrainingError) as info:
        train(store, tmp_path / "model", spec)
    assert str(info.value) == (
        f"{store.target}: holds no structures: all 3 were skipped when it was made "
        f"(`dparallel info {store.target}` says why)"
    )


def test_a_partition_holds_stored_derivatives_without_a_copy(store, monkeypatch) -> None:  # noqa: ANN001
    """Pairs stored by centre are held as read: a partition's dG/dr (most of its bytes:
    ~0.4 GB for 5,400 atoms of 192 functions and 82 neighbours) was copied by an identity
    permutation, doubling the peak of a load. Pairs out of order are still sorted."""
    from dparallel.store import Store

    read = Store.read_features
    seen: list[dict] = []

    def keep(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = read(self, *args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(Store, "read_features", keep)
    index = build_split_index(store, 0.0, 0.0, seed=0)
    part = load_partition(store, 0, "acsf", ["Cu"], index, True)
    held = part.rows["derivatives/Cu/Cu"].columns["dG_dr"]
    assert np.shares_memory(held, seen[-1]["Cu"]["d/Cu/dG_dr"])

    def shuffled(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = read(self, *args, **kwargs)
        d = out["Cu"]
        flip = np.arange(d["d/Cu/pair_first"].shape[0])[::-1]
        for k in ("pair_first", "pair_second", "center", "vectors", "dG_dr"):
            d[f"d/Cu/{k}"] = d[f"d/Cu/{k}"][flip]
        return out

    monkeypatch.setattr(Store, "read_features", shuffled)
    again = load_partition(store, 0, "acsf", ["Cu"], index, True).rows["derivatives/Cu/Cu"]
    rows = part.rows["derivatives/Cu/Cu"]
    assert np.all(np.diff(again.columns["first"]) >= 0)
    np.testing.assert_array_equal(again.offsets, rows.offsets)
    for name in ("first", "second", "center"):  # the same pairs of each centre
        key = np.lexsort((again.columns["second"], again.columns[name]))
        ref = np.lexsort((rows.columns["second"], rows.columns[name]))
        np.testing.assert_array_equal(again.columns[name][key], rows.columns[name][ref])


def _tensors(batch) -> list[torch.Tensor]:  # noqa: ANN001
    """Every tensor of ``batch``, in the order :func:`map_batch` walks them."""
    from dparallel.train.batch import map_batch

    out: list[torch.Tensor] = []
    map_batch(batch, lambda t: out.append(t) or t)
    return out


def _live_structures(reader: PartitionReader, monkeypatch) -> list[int]:  # noqa: ANN001
    """[now, peak] structures held by live partitions, whole or copied down."""
    import threading
    import weakref

    import dparallel.train.data as data_module

    held, lock = [0, 0], threading.Lock()

    def track(data):  # noqa: ANN001, ANN202
        n = data.n_structures
        with lock:
            held[0] += n
            held[1] = max(held[1], held[0])

        def gone() -> None:
            with lock:
                held[0] -= n

        weakref.finalize(data, gone)
        return data

    load, take = reader.load, data_module.take_structures
    monkeypatch.setattr(reader, "load", lambda p: track(load(p)))
    monkeypatch.setattr(data_module, "take_structures", lambda *a: track(take(*a)))
    return held


def test_structures_drawn_late_do_not_keep_their_partition(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """A shuffle buffer's stragglers (a few structures of a partition read long before) keep
    a copy of themselves, not the whole partition: fewer structures are held at once than
    with whole partitions (by one partition at least), and the batches are those assembled
    from the whole partitions, bitwise."""
    import gc

    import dparallel.train.data as data_module

    st = small_store(tmp_path, n=96, partition_atoms=300)
    index = build_split_index(st, 0.0, 0.0, seed=0)
    per_partition = max(len(index.ids[p]) for p in index.partitions)
    assert len(index.partitions) >= 8
    whole = {p: PartitionReader(st, "acsf", ["Cu"], index, True).load(p) for p in index.partitions}
    peaks = []
    for share in (data_module.COMPACT_SHARE, 0.0):  # 0: never copied down
        monkeypatch.setattr(data_module, "COMPACT_SHARE", share)
        reader = PartitionReader(st, "acsf", ["Cu"], index, forces=True, cache_bytes=0)
        held = _live_structures(reader, monkeypatch)
        plan = BatchPlan(index, "train", 2, shuffle=True, seed=1, shuffle_buffer=per_partition)
        expected = [reader.batch([(whole[p], s) for p, s in items]) for items in plan]
        plan = BatchPlan(index, "train", 2, shuffle=True, seed=1, shuffle_buffer=per_partition)
        for want, got in zip(expected, iterate_batches(reader, plan, prefetch=1), strict=True):
            assert np.array_equal(want.ids, got.ids)
            a, b = _tensors(want), _tensors(got)
            assert len(a) == len(b)
            assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
            del got
            gc.collect(0)
        peaks.append(held[1])
    assert peaks[0] <= peaks[1] - per_partition


@pytest.mark.parametrize("label", ["energy", "forces"])
def test_an_infinite_label_in_a_store_is_refused_not_left_out(store, monkeypatch, label) -> None:  # noqa: ANN001
    """The loss leaves out labels that are not finite (NaN: absent), so an infinite
    energy or force in a damaged store (the readers refuse one in a structure file) was
    dropped from training silently (found by fuzzing the store's files)."""
    import dataclasses

    from dparallel.errors import TrainingError

    index = build_split_index(store, 0.0, 0.0, seed=0)
    real = store.read_partition

    def damaged(p: int):  # noqa: ANN202
        batch = real(p)
        values = getattr(batch, label).copy()
        values.reshape(-1)[1] = -np.inf
        return dataclasses.replace(batch, **{label: values})

    monkeypatch.setattr(store, "read_partition", damaged)
    with pytest.raises(TrainingError, match=rf"partition 0: structures/{label}: infinite in 1 "):
        load_partition(store, 0, "acsf", ["Cu"], index, True)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 1e308])
@pytest.mark.parametrize("array", ["values", "d/Cu/dG_dr_split"])
def test_a_feature_value_that_is_not_finite_in_a_store_is_refused(tmp_path, value, array) -> None:  # noqa: ANN001
    """A NaN, an infinity, or 1e308 (float64, beyond float32: it overflows) written into a
    feature chunk stopped training with "the model diverged" (found by fuzzing the store's
    files); it is refused naming the partition and the array, and the fix."""
    import zarr

    from dparallel.errors import TrainingError

    store = small_store(tmp_path, n=6)
    index = build_split_index(store, 0.0, 0.0, seed=0)
    path = store.path / "parts" / "0" / "features" / "acsf" / "Cu" / array
    written = zarr.open_array(str(path), mode="r+")
    damaged = written[...]
    with np.errstate(over="ignore"):  # 1e308 in a float32 array: inf
        damaged[1, 2] = value
    written[...] = damaged
    name = "values" if array == "values" else "d/Cu/dG_dr"
    with pytest.raises(TrainingError) as info:
        load_partition(store, 0, "acsf", ["Cu"], index, True)
    message = str(info.value)  # a dG_dr_split value is up to 3 of dG/dr (x, y, z)
    assert re.search(rf"partition 0: features/acsf/Cu/{name}: [1-3] values not finite", message)
    assert f"dparallel info {store.target} --verify" in message
    assert "rerun the featurize that made it with --repair" in message
