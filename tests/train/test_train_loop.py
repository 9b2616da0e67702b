"""Training loop: resume continues the same trajectory, outputs, errors."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
from _callbacks import stop_after
from _store_fixture import small_store

from dparallel.errors import TrainingError
from dparallel.train import TrainingSpec, train
from dparallel.train import train as train_model


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return small_store(tmp_path_factory.mktemp("loop"), n=24)


SPEC = TrainingSpec(epochs=4, hidden=(8,), batch_size=3, seed=7, lr=5e-3, shuffle_buffer=5)


@pytest.mark.parametrize("schedule", ["cosine", "plateau"])
def test_resume_continues_the_same_trajectory(store, tmp_path, schedule) -> None:  # noqa: ANN001
    spec = SPEC.model_copy(update={"schedule": schedule, "optimizer": "adamw",
                                   "weight_decay": 1e-3})  # fmt: skip
    straight = train_model(store, tmp_path / "a", spec)
    part = train_model(store, tmp_path / "b", spec, callback=stop_after(2))
    assert len(part.history) == 2 and not part.test
    resumed = train_model(store, tmp_path / "b", spec, resume=True)
    assert [r["epoch"] for r in resumed.history] == [0, 1, 2, 3]
    for ra, rb in zip(straight.history, resumed.history, strict=True):
        for k in ra:
            if k not in ("seconds", "data_wait_fraction"):  # the timings
                assert ra[k] == rb[k], k  # bitwise
    ca = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)
    cb = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)
    for k, v in ca["model"].items():
        assert torch.equal(v, cb["model"][k]), k
    assert straight.test == resumed.test


def test_resume_with_more_epochs_follows_the_longer_cosine(store, tmp_path) -> None:  # noqa: ANN001
    """Cosine schedule, 2 epochs, then ``--resume`` with 5: from epoch 2 on the learning
    rate is that of a 5-epoch run (the closed form, and the straight run's own values),
    falling to the end, not past the 2-epoch cosine's end and back up."""
    import itertools
    import math

    spec = SPEC.model_copy(update={"schedule": "cosine", "epochs": 2})
    longer = spec.model_copy(update={"epochs": 5})
    straight = train_model(store, tmp_path / "a", longer)
    train_model(store, tmp_path / "b", spec)
    resumed = train_model(store, tmp_path / "b", longer, resume=True)
    lrs = [r["lr"] for r in resumed.history]
    cosine = [longer.lr_min + (longer.lr - longer.lr_min) * (1 + math.cos(math.pi * e / 5)) / 2
              for e in range(5)]  # fmt: skip
    assert lrs[2:] == pytest.approx(cosine[2:], rel=1e-12)
    assert lrs[2:] == pytest.approx([r["lr"] for r in straight.history][2:], rel=1e-12)
    assert all(b < a for a, b in itertools.pairwise(lrs[2:]))


def test_resume_with_no_epochs_left_finishes_the_model(store, tmp_path) -> None:  # noqa: ANN001
    """A checkpoint already at or past ``epochs`` (a killed run, resumed with fewer): the
    model is finished from it (model.pt, final metrics), not claimed and left unwritten."""
    part = train_model(store, tmp_path / "m", SPEC, callback=stop_after(3))
    assert len(part.history) == 3 and not (tmp_path / "m" / "model.pt").exists()
    done = train_model(store, tmp_path / "m", SPEC.model_copy(update={"epochs": 2}), resume=True)
    assert (tmp_path / "m" / "model.pt").is_file()
    assert [r["epoch"] for r in done.history] == [0, 1, 2] and done.test["force_rmse"] > 0


def test_outputs_metrics_and_plots(store, tmp_path) -> None:  # noqa: ANN001
    rows = []
    res = train_model(store, tmp_path / "m", SPEC.model_copy(update={"epochs": 2}),
                      callback=rows.append)  # fmt: skip
    assert [r["epoch"] for r in rows] == [0, 1]
    d = tmp_path / "m"
    for name in (
        "checkpoint.pt",
        "best.pt",
        "model.pt",
        "metrics.csv",
        "metrics.json",
        "spec.json",
        "learning_curves.png",
        "parity_validation.png",
        "parity_test.png",
    ):
        assert (d / name).is_file(), name  # fmt: skip
    doc = json.loads((d / "metrics.json").read_text())
    assert len(doc["epochs"]) == 2 and doc["final"]["test"]["force_rmse_meV_per_A"] > 0
    assert sum(doc["splits"].values()) == 24
    header = (d / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {
        "epoch",
        "lr",
        "seconds",
        "train_energy_rmse_meV_per_atom",
        "validation_force_mae_meV_per_A",
    } <= set(header)
    # written in meV (the CLI prints meV), kept in eV in memory
    final = doc["final"]["test"]
    assert final["energy_rmse_meV_per_atom"] == pytest.approx(1e3 * res.test["energy_rmse"])
    assert final["force_mae_meV_per_A"] == pytest.approx(1e3 * res.test["force_mae"])
    assert doc["epochs"][1]["validation_energy_rmse_meV_per_atom"] == pytest.approx(
        1e3 * rows[1]["validation_energy_rmse"]
    )


def test_resume_refuses_another_config(store, tmp_path) -> None:  # noqa: ANN001
    train_model(store, tmp_path / "m", SPEC, callback=stop_after(1))
    other = SPEC.model_copy(update={"lr": 1.0, "hidden": (6,)})
    with pytest.raises(TrainingError, match=r"\(hidden: \[8\] → \[6\]; lr: 0.005 → 1.0\)"):
        train_model(store, tmp_path / "m", other, resume=True)  # what differs, both values
    with pytest.raises(TrainingError, match="no checkpoint"):
        train_model(store, tmp_path / "other", SPEC, resume=True)


def test_store_without_features_is_rejected(tmp_path) -> None:  # noqa: ANN001
    from dparallel.datasets import write_emt_cu
    from dparallel.workflow.ingest import ingest

    data = write_emt_cu(tmp_path / "cu.xyz", 4)
    st = ingest(data, tmp_path / "s.zarr").store
    with pytest.raises(TrainingError) as info:
        train_model(st, tmp_path / "m", SPEC)
    assert str(info.value) == (  # one line, both fixes
        f"{st.target} holds structures but no descriptors (made by dparallel ingest): "
        "featurize its data (dparallel featurize DATA -o STORE --descriptors FILE), or "
        "compute the descriptors during training (dparallel train --descriptors FILE "
        "--descriptor-source computed; in Python train(..., descriptors=...) with "
        "descriptor_source: computed)"
    )
    # descriptors given, but read from the store (stored): names the switch
    from _store_fixture import small_acsf

    from dparallel.descriptors.descriptor_set import DescriptorSet

    given = DescriptorSet(acsf=small_acsf())
    with pytest.raises(TrainingError, match=r"holds no 'acsf' features: .*descriptor_source: "):
        train_model(st, tmp_path / "m", SPEC, descriptors=given)
    with pytest.raises(TypeError, match="descriptors is a ACSF, not a DescriptorSet"):
        train_model(st, tmp_path / "n", SPEC, descriptors=small_acsf())  # type: ignore[arg-type]
    assert not (tmp_path / "n").exists()  # refused before anything is written


def test_descriptors_given_for_a_featurized_store_must_be_its_own(store, tmp_path) -> None:  # noqa: ANN001
    from _store_fixture import small_acsf

    from dparallel.descriptors.descriptor_set import DescriptorSet

    spec = SPEC.model_copy(update={"epochs": 1})
    other = DescriptorSet(acsf=small_acsf(r_cut=4.5))
    with pytest.raises(TrainingError, match="featurized with other 'acsf' descriptors"):
        train_model(store, tmp_path / "other", spec, descriptors=other)
    same = train_model(store, tmp_path / "same", spec, descriptors=DescriptorSet(acsf=small_acsf()))
    plain = train_model(store, tmp_path / "plain", spec)
    assert same.history[0]["train_loss"] == plain.history[0]["train_loss"]


def test_resume_refuses_other_descriptors(tmp_path) -> None:  # noqa: ANN001
    """A store of structures only takes its descriptors from the caller: resuming with
    others (a model of other inputs, maybe as many) is refused."""
    from _store_fixture import ingested_store, small_acsf

    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors.descriptor_set import DescriptorSet

    data = write_emt_cu(tmp_path / "cu.xyz", 8, seed=1)
    st = ingested_store(data, tmp_path / "s.zarr")
    spec = SPEC.model_copy(update={"descriptor_source": "computed", "epochs": 3})
    first = DescriptorSet(acsf=small_acsf())
    train_model(st, tmp_path / "m", spec, descriptors=first, callback=stop_after(1))
    other = DescriptorSet(acsf=small_acsf(r_cut=4.5))  # as many features
    with pytest.raises(TrainingError, match="other acsf descriptors"):
        train_model(st, tmp_path / "m", spec, descriptors=other, resume=True)
    done = train_model(st, tmp_path / "m", spec, descriptors=first, resume=True)
    assert len(done.history) == 3


@pytest.mark.integration
def test_epoch_metrics_reach_the_scheduler_events(store, tmp_path) -> None:  # noqa: ANN001
    from distributed import Client, LocalCluster

    from dparallel.dashboard import TOPIC_TRAIN, epoch_publisher

    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        spec = SPEC.model_copy(update={"epochs": 2})
        train_model(store, tmp_path / "m", spec, callback=epoch_publisher("r1"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            events = [msg for _, msg in client.get_events(TOPIC_TRAIN)]
            if len(events) >= 5:
                break
            time.sleep(0.1)
    assert events[0] == {"kind": "start", "run": "r1", "run_id": events[1]["run_id"]}
    events = events[1:]
    assert len(events) == 4  # train + validation per epoch
    assert {(e["run"], e["epoch"], e["split"]) for e in events} == {
        ("r1", ep, sp) for ep in (0, 1) for sp in ("train", "validation")
    }


def test_energy_only_training_and_store_without_derivatives(store, tmp_path) -> None:  # noqa: ANN001
    import math

    from _store_fixture import build_store, small_acsf

    energy_only = SPEC.model_copy(update={"epochs": 1, "force_weight": 0.0})
    res = train_model(store, tmp_path / "e", energy_only)
    row = res.history[0]
    assert math.isfinite(row["train_energy_rmse"]) and math.isnan(row["train_force_rmse"])
    nod = build_store(_data(store), tmp_path / "nod.zarr",
                      small_acsf(), derivatives=False, partition_atoms=150)  # fmt: skip
    with pytest.raises(TrainingError, match="without derivatives"):
        train_model(nod, tmp_path / "f", SPEC)
    ok = train_model(nod, tmp_path / "g", energy_only)
    assert math.isfinite(ok.test["energy_rmse"])


def _data(store):  # noqa: ANN001, ANN202
    """The structure file a store was ingested from."""
    return store.attrs["source"]["path"]


def test_early_stopping_keeps_the_best_model(store, tmp_path) -> None:  # noqa: ANN001
    spec = SPEC.model_copy(update={"epochs": 10, "lr": 50.0, "early_stopping": 2,
                                   "schedule": "none"})  # fmt: skip
    rows: list[dict] = []
    res = train_model(store, tmp_path / "m", spec, callback=rows.append)
    assert len(res.history) < 10  # a diverging run stops early
    losses = [r["validation_loss"] for r in res.history]
    best = min(range(len(losses)), key=lambda k: losses[k] if losses[k] == losses[k] else 1e300)
    assert res.best_epoch == best and len(res.history) == best + 3
    assert res.validation["loss"] == pytest.approx(losses[best], rel=1e-12)
    # each callback row says the best epoch so far (the dashboard shows it), and only it
    seen = [r["validation_loss"] if r["validation_loss"] == r["validation_loss"] else 1e300
            for r in rows]  # fmt: skip
    assert [r["best_epoch"] for r in rows] == [
        min(range(k + 1), key=seen.__getitem__) for k in range(len(rows))
    ]
    assert all("best_epoch" not in r for r in res.history)  # not a metrics.csv column


def test_resuming_a_run_that_stopped_early_trains_no_further(store, tmp_path) -> None:  # noqa: ANN001
    """Its checkpoint holds the early stop (a run killed while finishing, or resumed again):
    resumed, it trained another epoch (which could become the best) where the straight run
    had stopped; now it finishes the model from the checkpoint, as the straight run did."""
    spec = SPEC.model_copy(update={"epochs": 10, "lr": 50.0, "early_stopping": 2,
                                   "schedule": "none"})  # fmt: skip
    straight = train_model(store, tmp_path / "m", spec)
    assert len(straight.history) < 10
    model = torch.load(tmp_path / "m" / "model.pt", weights_only=True)
    (tmp_path / "m" / "model.pt").unlink()  # killed after its last checkpoint
    resumed = train_model(store, tmp_path / "m", spec, resume=True)
    assert [r["epoch"] for r in resumed.history] == [r["epoch"] for r in straight.history]
    assert resumed.best_epoch == straight.best_epoch and resumed.test == straight.test
    again = torch.load(tmp_path / "m" / "model.pt", weights_only=True)
    assert all(torch.equal(v, again["state_dict"][k]) for k, v in model["state_dict"].items())


def _poison_from(monkeypatch, first: int) -> None:  # noqa: ANN001
    """From epoch ``first`` on, a weight of the model is NaN before the epoch trains (a
    diverged model: every loss after it is NaN)."""
    from dparallel.train import loop

    original = loop._train_epoch

    def poisoned(run, epoch):  # noqa: ANN001, ANN202
        if epoch >= first:
            with torch.no_grad():
                next(run.model.parameters()).fill_(float("nan"))
        return original(run, epoch)

    monkeypatch.setattr(loop, "_train_epoch", poisoned)


def test_a_loss_not_finite_before_any_good_epoch_is_one_error(store, tmp_path, monkeypatch):  # noqa: ANN001
    """It ran every epoch with NaN, saved no best model, then ended saying "finish it with
    --resume"; now the first such epoch stops it, saying why."""
    _poison_from(monkeypatch, 0)
    with pytest.raises(TrainingError, match=r"epoch 0: the loss is not finite .* diverged"):
        train_model(store, tmp_path / "m", SPEC)
    assert not (tmp_path / "m" / "checkpoint.pt").exists()


def test_a_run_that_diverges_stops_with_its_best_epoch(store, tmp_path, monkeypatch):  # noqa: ANN001
    _poison_from(monkeypatch, 2)
    res = train_model(store, tmp_path / "m", SPEC.model_copy(update={"epochs": 6}))
    assert [r["epoch"] for r in res.history] == [0, 1] and res.best_epoch in (0, 1)
    assert math.isfinite(res.test["energy_rmse"])
    metrics = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert [r["epoch"] for r in metrics["epochs"]] == [0, 1]
    checkpoint = torch.load(tmp_path / "m" / "checkpoint.pt", weights_only=True)
    assert checkpoint["epoch"] == 1  # the last finite epoch, which --resume continues


def test_a_store_replaced_mid_epoch_is_named_not_the_read_that_broke(store, tmp_path, monkeypatch):  # noqa: ANN001
    """An overwrite while training reads the store broke a read (shapes of another store:
    an IndexError, a size mismatch) with a traceback; the run now says the store changed."""
    import shutil

    from dparallel.store import open_store
    from dparallel.train import loop

    copy = tmp_path / "s.zarr"
    shutil.copytree(store.path, copy)
    original = loop._train_epoch

    def replaced_then_read(run, epoch):  # noqa: ANN001, ANN202
        if epoch == 1:
            shutil.rmtree(copy)  # featurized again elsewhere, or removed
            raise IndexError("index 0 is out of bounds for axis 0 with size 0")
        return original(run, epoch)

    monkeypatch.setattr(loop, "_train_epoch", replaced_then_read)
    with pytest.raises(TrainingError, match=r"changed under this run"):
        train_model(open_store(copy), tmp_path / "m", SPEC)


def test_resume_takes_other_threads_and_read_ahead(store, tmp_path) -> None:  # noqa: ANN001
    """Keys of how fast it trains, not what: an interrupted run resumes across them (a
    rerun with `threads` changed trained afresh, deleting the epochs done)."""
    train_model(store, tmp_path / "m", SPEC, callback=stop_after(2))
    faster = SPEC.model_copy(update={"threads": 2, "prefetch": 2, "batch_prefetch": 3})
    resumed = train_model(store, tmp_path / "m", faster, resume=True)
    assert [r["epoch"] for r in resumed.history] == [0, 1, 2, 3]


def test_the_threads_of_a_run_are_its_own(store, tmp_path) -> None:  # noqa: ANN001
    """``threads`` (1 by default) was set for the whole process and stayed after train()
    returned: torch work after it (a notebook's next cell) ran on one thread. Restored now,
    as the ASE calculator restores its own."""
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        train_model(store, tmp_path / "m", SPEC.model_copy(update={"epochs": 1, "threads": 1}))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


def test_a_run_leaves_the_callers_random_numbers_alone(store, tmp_path) -> None:  # noqa: ANN001
    """The run seeds torch's global generator (``seed``) and draws from it; train() left
    it reseeded, so a notebook's later torch.randn repeated the same numbers after every
    run. The caller's generator state is restored, and the run's own draws still follow
    its seed (two runs, two different caller states, equal models)."""
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    expected = torch.rand(3)
    torch.set_rng_state(before)
    one = train_model(store, tmp_path / "a", SPEC.model_copy(update={"epochs": 1}))
    assert torch.equal(torch.rand(3), expected)
    torch.manual_seed(99)
    two = train_model(store, tmp_path / "b", SPEC.model_copy(update={"epochs": 1}))
    timings = {"seconds", "data_wait_fraction"}
    assert [{k: v for k, v in r.items() if k not in timings} for r in one.history] == [
        {k: v for k, v in r.items() if k not in timings} for r in two.history
    ]


def test_a_run_inside_no_grad_or_inference_mode_trains_as_outside(store, tmp_path) -> None:  # noqa: ANN001
    """A notebook cell under ``torch.no_grad()`` (or ``inference_mode()``) calling train()
    failed with torch's "element 0 of tensors does not require grad and does not have a
    grad_fn"; the run turns gradients on for itself, and the caller's mode stays."""
    spec = SPEC.model_copy(update={"epochs": 1})
    timings = {"seconds", "data_wait_fraction"}
    histories = [
        [{k: v for k, v in r.items() if k not in timings} for r in run.history]
        for run in [train_model(store, tmp_path / "free", spec)]
    ]
    for name, mode in (("nograd", torch.no_grad), ("inference", torch.inference_mode)):
        with mode():
            run = train_model(store, tmp_path / name, spec)
            assert not torch.is_grad_enabled()
        histories.append([{k: v for k, v in r.items() if k not in timings} for r in run.history])
    assert histories[1] == histories[0] and histories[2] == histories[0]
    assert torch.is_grad_enabled()


@pytest.mark.parametrize("spec", [{"epochs": 1}, "train.yaml"])
def test_a_spec_that_is_no_training_spec_is_named_before_anything_is_written(tmp_path, spec):  # noqa: ANN001
    # train(store, "m", {"epochs": 1}) failed inside: "'dict' object has no attribute 'threads'"
    from dparallel.train import train

    with pytest.raises(TypeError) as refused:
        train(tmp_path / "s.zarr", tmp_path / "m", spec)
    assert str(refused.value) == (
        f"train: spec is a {type(spec).__name__}, not a TrainingSpec (a mapping or a file of "
        "training keys: dparallel.train.parse_training_spec(...))"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_incomplete_ingested_store_says_rerun_ingest(tmp_path) -> None:  # noqa: ANN001
    """It said "rerun the same featurize command" of a store that ingest makes."""
    from _store_fixture import ingested_store, small_acsf

    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.store import open_store

    data = write_emt_cu(tmp_path / "cu.xyz", 8, seed=1)
    st = ingested_store(data, tmp_path / "s.zarr", partition_atoms=100)
    assert st.n_partitions >= 2
    open_store(st.target, mode="r+").clear_done(1)  # as an ingest killed part-way leaves it
    spec = SPEC.model_copy(update={"descriptor_source": "computed"})
    with pytest.raises(TrainingError) as info:
        train_model(st.target, tmp_path / "m", spec, descriptors=DescriptorSet(acsf=small_acsf()))
    total = st.n_partitions
    assert f"incomplete: {total - 1} of {total} partitions are ingested (" in str(info.value)
    assert "rerun the same ingest command" in str(info.value)


@pytest.mark.parametrize("allow_incomplete", [False, True])
def test_a_store_with_no_partition_done_says_so(tmp_path, allow_incomplete) -> None:  # noqa: ANN001
    """It said "holds no structures: all 0 were skipped when it was made" of a store whose
    run had done no partition yet (nothing was skipped), and "featurize the store first"
    of an ingested one with --allow-incomplete."""
    from _store_fixture import ingested_store, small_acsf

    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.store import open_store

    data = write_emt_cu(tmp_path / "cu.xyz", 8, seed=1)
    st = ingested_store(data, tmp_path / "s.zarr", partition_atoms=100)
    writable = open_store(st.target, mode="r+")
    for p in range(st.n_partitions):  # as an ingest killed before its first partition
        writable.clear_done(p)
    spec = SPEC.model_copy(
        update={"descriptor_source": "computed", "allow_incomplete": allow_incomplete}
    )
    with pytest.raises(TrainingError) as info:
        train_model(st.target, tmp_path / "m", spec, descriptors=DescriptorSet(acsf=small_acsf()))
    if allow_incomplete:
        assert str(info.value) == (
            f"{st.target}: no partition is done; rerun the ingest command that made it"
        )
    else:
        assert f"incomplete: 0 of {st.n_partitions} partitions are ingested (" in str(info.value)


def test_a_batch_is_not_held_while_the_next_is_assembled(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Streamed on the CPU (training and validation), the batch before is freed (its
    tensors) by the time the next one is assembled: the loop, the feed's generators and
    the loader each dropped it."""
    import gc
    import weakref

    from dparallel.train.data import PartitionReader

    store = small_store(tmp_path, n=24)
    assemble_batch = PartitionReader.batch
    previous: list[weakref.ref] = []
    calls = [0]

    def batch(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        gc.collect(0)
        assert all(ref() is None for ref in previous), "the batch before is still held"
        out = assemble_batch(self, *args, **kwargs)
        previous[:] = [weakref.ref(out.forces)]
        calls[0] += 1
        return out

    monkeypatch.setattr(PartitionReader, "batch", batch)
    spec = TrainingSpec(epochs=2, batch_size=2, validation_fraction=0.25, test_fraction=0.0)
    monkeypatch.setenv("DPARALLEL_TRAIN_CACHE_MB", "0")
    train(store, tmp_path / "m", spec)
    assert calls[0] > 10
