"""Untrusted files and incomplete stores: nothing runs, nothing is silently half-used."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch
from _store_fixture import build_store, small_acsf

from dparallel.cli.main import main
from dparallel.deploy import load_atomic_energies, load_deployed
from dparallel.errors import TrainingError
from dparallel.train import TrainingSpec, load_model
from dparallel.train import train as train_model
from dparallel.train.export import export_model

SPEC = TrainingSpec(epochs=2, hidden=(4,), batch_size=4, seed=1, shuffle_buffer=4)


class _Evil:
    """Unpickling this runs a command (what a crafted checkpoint does)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):  # noqa: ANN001, ANN201
    from dparallel.datasets import write_emt_cu

    root = tmp_path_factory.mktemp("files")
    data = write_emt_cu(root / "cu.xyz", 12, seed=4)
    store = build_store(data, root / "cu.zarr", small_acsf(), partition_atoms=100)
    train_model(store, root / "model", SPEC)
    export_model(root / "model", artifacts=False)
    return store, root


def test_crafted_checkpoint_does_not_run_on_resume(trained, tmp_path, capsys) -> None:  # noqa: ANN001
    store, root = trained
    model_dir = tmp_path / "m"
    shutil.copytree(root / "model", model_dir)
    marker = tmp_path / "pwned"
    ck = torch.load(model_dir / "checkpoint.pt", weights_only=True)
    ck["history"] = [_Evil(str(marker))]
    torch.save(ck, model_dir / "checkpoint.pt")
    with pytest.raises(TrainingError, match="refusing to load this checkpoint") as info:
        train_model(store, model_dir, SPEC.model_copy(update={"epochs": 3}), resume=True)
    assert str(model_dir / "checkpoint.pt") in str(info.value)
    assert not marker.exists()
    argv = ["train", str(store.path), "-o", str(model_dir), "--resume", "--set", "epochs=3",
            "--set", "hidden=[4]", "--set", "batch_size=4", "--set", "seed=1",
            "--set", "shuffle_buffer=4", "-q"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "refusing to load this checkpoint" in err
    assert not marker.exists()


@pytest.mark.parametrize("name", ["checkpoint.pt", "model.pt", "deployed.pt", "best.pt"])
def test_truncated_or_foreign_files_are_named(trained, tmp_path, name) -> None:  # noqa: ANN001
    store, root = trained
    model_dir = tmp_path / "m"
    shutil.copytree(root / "model", model_dir)
    path = model_dir / name
    data = path.read_bytes()
    loaders = {
        "checkpoint.pt": lambda: train_model(store, model_dir, SPEC, resume=True),
        "model.pt": lambda: load_model(model_dir),
        "best.pt": lambda: load_model(model_dir / "best.pt"),
        "deployed.pt": lambda: load_deployed(model_dir),
    }
    for broken in (data[: len(data) // 2], b"", b"not a zip at all"):
        path.write_bytes(broken)
        with pytest.raises(TrainingError, match="truncated or corrupt") as info:
            loaders[name]()
        assert str(path) in str(info.value)
    torch.save([1, 2, 3], path)  # a valid torch file, but not ours
    with pytest.raises(TrainingError, match=f"{path}: not a dparallel"):
        loaders[name]()


def test_truncated_exported_program_is_named(trained, tmp_path) -> None:  # noqa: ANN001
    _, root = trained
    model_dir = tmp_path / "m"
    shutil.copytree(root / "model", model_dir)
    assert "Cu" in load_atomic_energies(model_dir)
    pt2 = model_dir / "atomic_energy_Cu.pt2"
    pt2.write_bytes(pt2.read_bytes()[:100])
    with pytest.raises(TrainingError, match=r"atomic_energy_Cu.pt2: cannot load"):
        load_atomic_energies(model_dir)


def test_incomplete_store_is_refused_unless_allowed(trained, tmp_path, capsys, caplog) -> None:  # noqa: ANN001
    store, _ = trained
    copy = tmp_path / "part.zarr"
    shutil.copytree(store.path, copy)
    from dparallel.store import open_store

    partial = open_store(copy, mode="r+")
    total = partial.n_partitions
    assert total >= 3
    partial.clear_done(1)  # as a client killed part-way leaves it
    used = open_store(copy).n_structures
    with pytest.raises(TrainingError, match=rf"incomplete: {total - 1} of {total} partitions"):
        train_model(copy, tmp_path / "m0", SPEC)
    assert main(["train", str(copy), "-o", str(tmp_path / "m1"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "--allow-incomplete" in err and len(err.strip().splitlines()) == 1
    assert main(["train", str(copy), "-o", str(tmp_path / "m2"), "-q", "--allow-incomplete",
                 "--set", "epochs=1", "--set", "hidden=[4]"]) == 0  # fmt: skip
    assert f"{total - 1} of {total} partitions are featurized ({used} of 12 structures)" in (
        caplog.text + capsys.readouterr().err
    )
    data = json.loads((tmp_path / "m2" / "metrics.json").read_text())["data"]
    assert data["complete"] is False and data["partitions_used"] == total - 1
    assert data["structures_used"] == used and data["structures_in_source"] == 12
    result = train_model(copy, tmp_path / "m3", SPEC.model_copy(update={"allow_incomplete": True}))
    assert sum(result.history[0][k] for k in ("epoch",)) == 0


def test_a_model_trained_from_python_records_its_data_units(trained) -> None:  # noqa: ANN001
    """``evaluate`` reads new data in the units the model was trained from, CLI or not."""
    from dparallel.train.data_units import recorded_data_units

    store, root = trained
    units = store.attrs["config"]["ingest"]["units"]
    assert isinstance(units, str)
    assert recorded_data_units(root / "model") == units
    assert recorded_data_units(root / "model" / "model.pt") == units


def test_a_store_completed_while_its_split_index_is_built(trained, tmp_path) -> None:  # noqa: ANN001
    """``--allow-incomplete`` on a store still being written: partitions are done while
    the reader counts and while the index reads; the index keeps the snapshot it started
    from (it switched to the complete store's numbering midway: IndexError)."""
    from dparallel.store import open_store
    from dparallel.train.splits import build_split_index

    store, _ = trained
    copy = tmp_path / "growing.zarr"
    shutil.copytree(store.path, copy)
    writer = open_store(copy, mode="r+")
    last = writer.n_partitions - 1
    writer.clear_done(last - 1)
    writer.clear_done(last)
    reader = open_store(copy)
    assert reader.n_structures > 0  # counted (and kept) with two partitions pending
    writer.mark_done(last - 1)
    done_now = []

    def finish_the_writer(p, batch, split) -> None:  # noqa: ANN001
        if not done_now:
            writer.mark_done(last)  # the featurize run ends meanwhile
            done_now.append(p)

    index = build_split_index(reader, 0.1, 0.1, 7, visit=finish_the_writer)
    assert index.partitions == list(range(last)) and done_now
    every = np.concatenate([index.ids[p] for p in index.partitions])
    assert (
        len(np.unique(every))
        == len(every)
        == sum(reader.read_partition(p).n_structures for p in range(last))
    )


def test_plots_on_a_full_disk_are_one_warning_line(tmp_path, monkeypatch, caplog) -> None:  # noqa: ANN001
    """Plots are last and optional: a failure is one warning without a traceback (that is
    at debug level, ``-v``) and no advice to rerun (a plain rerun of train trains anew)."""
    import errno
    import logging

    import dparallel.train.reporting as reporting
    from dparallel._files import _replacing

    def full(history, path):  # noqa: ANN001, ANN202
        with _replacing(path.with_name("tmp.png"), path, 4096):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reporting, "plot_learning_curves", full)
    with caplog.at_level(logging.WARNING, logger="dparallel.train.reporting"):
        reporting.write_plots(tmp_path, [{"epoch": 0}], {})
    (record,) = caplog.records
    text = record.getMessage()
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert "\n" not in text and f"could not write the plots in {tmp_path}" in text
    assert "no space left on the device (needed 4,096 bytes)" in text
    assert "rerun" not in text
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="dparallel.train.reporting"):
        reporting.write_plots(tmp_path, [{"epoch": 0}], {})
    assert [r.exc_info is not None for r in caplog.records] == [False, True]


def test_resume_after_more_partitions_landed_keeps_every_structures_split(
    trained,  # noqa: ANN001
    tmp_path,  # noqa: ANN001
) -> None:
    """The checkpoint holds no split: a resumed run splits what is done then by source
    index, so the first run's test and validation structures stay there and the newly
    done partition's structures join theirs (metrics.json: source indices)."""
    from dparallel.store import open_store
    from dparallel.train.splits import build_split_index

    store, _ = trained
    copy = tmp_path / "part.zarr"
    shutil.copytree(store.path, copy)
    writer = open_store(copy, mode="r+")
    writer.clear_done(1)
    spec = SPEC.model_copy(update={"allow_incomplete": True, "epochs": 1,
                                   "validation_fraction": 0.25, "test_fraction": 0.25})  # fmt: skip
    train_model(copy, tmp_path / "m", spec)
    first = json.loads((tmp_path / "m" / "metrics.json").read_text())
    writer.mark_done(1)
    train_model(copy, tmp_path / "m", spec.model_copy(update={"epochs": 2}), resume=True)
    second = json.loads((tmp_path / "m" / "metrics.json").read_text())
    whole = build_split_index(open_store(copy), 0.25, 0.25, seed=1)
    a, b = store.partition_range(1)
    for key, name in (("test_ids", "test"), ("validation_ids", "validation")):
        want = whole.ids_of(name).tolist()
        assert second[key] == want and want  # source indices of the complete store's split
        assert first[key] == [i for i in want if not a <= i < b]
    # the resumed model keeps the first run's reference energies; metrics.json says its own
    kept = torch.load(tmp_path / "m" / "model.pt", weights_only=True)["state_dict"]["ref_energy"]
    assert list(second["reference_energies"].values()) == kept.tolist()
    assert second["reference_energies"] == first["reference_energies"]


def _trained_before_a_late_partition(trained, tmp_path, fraction=0.4, split="validation"):  # noqa: ANN001, ANN202
    """A copy of the trained store, one epoch trained into ``tmp_path/m`` (with
    ``validation_fraction`` ``fraction``) while its last partition with ``split``
    structures was not done, then that partition done again: the copy, the spec, the
    complete store's split and the first run's result."""
    from dparallel.store import open_store
    from dparallel.train.splits import build_split_index

    store, _ = trained
    copy = tmp_path / "part.zarr"
    shutil.copytree(store.path, copy)
    spec = SPEC.model_copy(update={"allow_incomplete": True, "epochs": 1,
                                   "validation_fraction": fraction})  # fmt: skip
    whole = build_split_index(open_store(copy), fraction, spec.test_fraction, seed=1)
    late = whole.partitions_with(split)[-1]  # done after the first run
    writer = open_store(copy, mode="r+")
    writer.clear_done(late)
    first = train_model(copy, tmp_path / "m", spec)
    writer.mark_done(late)
    return copy, spec, whole, first


def test_resume_on_a_larger_validation_set_measures_the_best_model_on_it(
    trained,  # noqa: ANN001
    tmp_path,  # noqa: ANN001
    caplog,  # noqa: ANN001
) -> None:
    """The best loss of a run on an incomplete store was measured on fewer validation
    structures: resumed once more partitions are done, best.pt is scored on the new
    validation set, and the resumed epochs compare with that (not with a loss over other
    structures). Resumed on the same data, nothing is measured again."""
    import logging

    from dparallel.store import open_store
    from dparallel.train.checkpoints import split_digest
    from dparallel.train.data import PartitionReader
    from dparallel.train.reporting import evaluate_split

    copy, spec, whole, first = _trained_before_a_late_partition(trained, tmp_path)
    first_ids = json.loads((tmp_path / "m" / "metrics.json").read_text())["validation_ids"]
    assert set(whole.ids_of("validation")) > set(first_ids)
    best_model, _ = load_model(tmp_path / "m" / "best.pt")
    reader = PartitionReader(open_store(copy), "acsf", best_model.elements, whole, True)
    rescored = evaluate_split(best_model, reader, "validation", spec).summary()["loss"]
    assert rescored != pytest.approx(first.history[0]["validation_loss"], rel=1e-6)
    with caplog.at_level(logging.INFO, logger="dparallel.train.loop"):
        resumed = train_model(copy, tmp_path / "m", spec.model_copy(update={"epochs": 2}),
                              resume=True)  # fmt: skip
    assert "measured on it again" in caplog.text
    ck = torch.load(tmp_path / "m" / "checkpoint.pt", weights_only=True)
    new = resumed.history[-1]["validation_loss"]
    assert ck["best_val"] == pytest.approx(min(rescored, new), rel=1e-9)
    assert ck["best_epoch"] == (1 if new < rescored else 0)
    assert ck["validation_digest"] == split_digest(whole.ids_of("validation"))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dparallel.train.loop"):
        train_model(copy, tmp_path / "m", spec.model_copy(update={"epochs": 3}), resume=True)
    assert "measured on it again" not in caplog.text


def test_a_best_model_not_finite_on_the_new_validation_set_is_no_best(
    trained,  # noqa: ANN001
    tmp_path,  # noqa: ANN001
    caplog,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
) -> None:
    """Resumed on a larger validation set where best.pt's loss is NaN (a prediction that
    is not finite on a new structure; here the re-score's summary made NaN), best.pt is
    no best: as an epoch of a non-finite loss never is one, the resumed epoch becomes the
    best and replaces best.pt. The best loss was NaN, which no epoch is below: best.pt
    was kept for good and every epoch counted towards early stopping."""
    import logging

    from dparallel.train import loop

    copy, spec, _, _ = _trained_before_a_late_partition(trained, tmp_path)
    first_best = (tmp_path / "m" / "best.pt").read_bytes()

    class _NaN:
        def summary(self) -> dict[str, float]:
            return {"loss": float("nan")}

    real, calls = loop.evaluate_split, []

    def rescored_nan(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(args[2])
        return _NaN() if len(calls) == 1 else real(*args, **kwargs)  # the re-score first

    monkeypatch.setattr(loop, "evaluate_split", rescored_nan)
    with caplog.at_level(logging.INFO, logger="dparallel.train.loop"):
        resumed = train_model(copy, tmp_path / "m", spec.model_copy(update={"epochs": 2}),
                              resume=True)  # fmt: skip
    assert calls[0] == "validation"
    ck = torch.load(tmp_path / "m" / "checkpoint.pt", weights_only=True)
    new = resumed.history[-1]["validation_loss"]
    assert np.isfinite(new) and ck["best_val"] == new and ck["best_epoch"] == 1
    assert resumed.best_epoch == 1 and ck["bad_epochs"] == 0
    assert (tmp_path / "m" / "best.pt").read_bytes() != first_best  # the resumed epoch's
    assert "not finite on the new validation set" in caplog.text


def test_data_units_json_is_written_once_by_training_for_any_store(
    trained,  # noqa: ANN001
    tmp_path,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
) -> None:
    """Training writes it (the CLI wrote it again from the store as typed, a path read by
    hand: another ``store`` in it, and nothing for a URL); a store at a URL records the
    same units as a local one."""
    from dparallel.store import create_store, open_store
    from dparallel.train import data_units

    store, _ = trained
    writes = []
    original = data_units.write_file

    def spy(path, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        writes.append(path)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(data_units, "write_file", spy)
    monkeypatch.chdir(store.path.parent)
    argv = ["train", store.path.name, "-o", str(tmp_path / "m"), "-q",
            "--set", "epochs=1", "--set", "hidden=[4]"]  # fmt: skip
    assert main(argv) == 0
    assert writes == [tmp_path / "m" / "data_units.json"]
    recorded = json.loads((tmp_path / "m" / "data_units.json").read_text())
    location = str(open_store(store.path).location)
    fmt = store.attrs["config"]["ingest"]["format"]
    assert recorded == {"data_units": "ase", "data_format": fmt, "store": location}
    # the same from a store at a URL (only the location differs)
    config = {"ingest": {"units": store.attrs["config"]["ingest"]["units"]}}
    url = f"memory://data-units-{tmp_path.name}/s.zarr"
    args = {"source_fingerprint": store.attrs["source"], "plan": store.plan, "config": config}
    for target, folder in ((url, "url"), (tmp_path / "s.zarr", "local")):
        (tmp_path / folder).mkdir()
        data_units.record_data_units(tmp_path / folder, create_store(target, **args))
    local = json.loads((tmp_path / "local" / "data_units.json").read_text())
    remote = json.loads((tmp_path / "url" / "data_units.json").read_text())
    assert local == {**remote, "store": str(tmp_path / "s.zarr")} and remote["store"] == url
    assert remote["data_units"] == "ase"


def test_resume_without_validation_on_a_larger_training_set_compares_afresh(
    trained,  # noqa: ANN001
    tmp_path,  # noqa: ANN001
    caplog,  # noqa: ANN001
) -> None:
    """With ``validation_fraction: 0`` an epoch's running training loss picks the best
    epoch: resumed once another partition's training structures are done, the best loss
    (over fewer structures) is forgotten, so the resumed epoch replaces best.pt and early
    stopping counts from it (the digest covered only a validation set, so the resumed
    epochs compared their loss with one over other structures). A plain resume keeps it."""
    import logging

    from dparallel.train.checkpoints import split_digest

    copy, spec, whole, _ = _trained_before_a_late_partition(trained, tmp_path, 0.0, "train")
    first = torch.load(tmp_path / "m" / "checkpoint.pt", weights_only=True)
    with caplog.at_level(logging.INFO, logger="dparallel.train.loop"):
        resumed = train_model(copy, tmp_path / "m", spec.model_copy(update={"epochs": 2}),
                              resume=True)  # fmt: skip
    assert "the training set is not the one of the checkpoint's best loss" in caplog.text
    ck = torch.load(tmp_path / "m" / "checkpoint.pt", weights_only=True)
    assert ck["validation_digest"] == split_digest(whole.ids_of("train"))
    assert ck["best_epoch"] == 1 and ck["bad_epochs"] == 0 and resumed.best_epoch == 1
    assert ck["best_val"] == resumed.history[-1]["train_loss"] != first["best_val"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dparallel.train.loop"):
        train_model(copy, tmp_path / "m", spec.model_copy(update={"epochs": 3}), resume=True)
    assert "is not the one of the checkpoint's best loss" not in caplog.text


def test_resume_with_best_pt_missing_keeps_no_best_and_with_no_epochs_left_says_so(
    trained,  # noqa: ANN001
    tmp_path,  # noqa: ANN001
    caplog,  # noqa: ANN001
) -> None:
    """best.pt deleted before a resume: the checkpoint's best is no best (warned), the next
    epoch becomes it and writes best.pt. With no epochs left there is no best to finish
    with: a TrainingError says to resume with more epochs (the finish read the missing
    file, or wrote model.pt with best_epoch -1)."""
    import logging

    store, _ = trained
    train_model(store, tmp_path / "m", SPEC)
    (tmp_path / "m" / "best.pt").unlink()
    with pytest.raises(TrainingError, match=r"no epochs are left: resume with more epochs"):
        train_model(store, tmp_path / "m", SPEC, resume=True)
    assert not (tmp_path / "m" / "best.pt").exists()
    with caplog.at_level(logging.WARNING, logger="dparallel.train.loop"):
        resumed = train_model(store, tmp_path / "m", SPEC.model_copy(update={"epochs": 3}),
                              resume=True)  # fmt: skip
    assert "best.pt is missing" in caplog.text
    assert resumed.best_epoch == 2 and (tmp_path / "m" / "best.pt").is_file()
    assert json.loads((tmp_path / "m" / "metrics.json").read_text())["best_epoch"] == 2
