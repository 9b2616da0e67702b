"""``init_from``: a new training that starts from a dparallel model's or an n2p2 potential's
weights. Before the first update the model predicts what the source predicts (through the
source's own ASE calculator; an n2p2 potential through n2p2's ``nnp-dataset``), fine-tuning
beats a random start, and what cannot match is refused."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from _store_fixture import build_store, small_acsf, write_emt_alloy

from dparallel.datasets import write_emt_cu
from dparallel.errors import CheckpointMismatchError, TrainingError
from dparallel.nn.folders import model_fingerprint
from dparallel.train import TrainingSpec, parse_training_spec
from dparallel.train import train as train_model
from dparallel.train.checkpoints import save_model
from dparallel.train.device import Target
from dparallel.train.init_from import check_spec, load_source
from dparallel.train.model_dir import started_from
from dparallel.train.preparation import build_model, prepare

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "n2p2"))
from n2p2_helpers import alloy_structures, assert_same, n2p2_potential, nnp_dataset

if TYPE_CHECKING:
    from dparallel.store import Store

_SOURCE = {"hidden": (8,), "batch_size": 4, "validation_fraction": 0.0, "test_fraction": 0.25}


def _store(root: Path, name: str, seed: int, n: int = 16, acsf=None) -> Store:  # noqa: ANN001
    data = write_emt_cu(root / f"{name}.xyz", n, seed=seed)
    return build_store(data, root / f"{name}.zarr", acsf or small_acsf())


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small model trained (12 epochs) on EMT Cu structures of seed 3."""
    root = tmp_path_factory.mktemp("source")
    train_model(_store(root, "a", 3), root / "model", TrainingSpec(epochs=12, **_SOURCE))
    return root / "model"


def _built(store: Store, spec: TrainingSpec, out: Path) -> Path:
    """The model training builds before its first update, saved as a model directory."""
    prep = prepare(store, spec)
    model = build_model(prep, spec, Target.of(spec))
    out.mkdir()
    save_model(model, spec, prep.descriptor_spec, out / "model.pt")
    return out


def _predictions(model_dir: Path, structures: list) -> tuple[np.ndarray, np.ndarray]:
    from dparallel.ase import Calculator
    from dparallel.train.export import export_model

    if not (model_dir / "deployed.pt").is_file():
        export_model(model_dir, artifacts=False)
    calc = Calculator(model_dir)
    energies, forces = [], []
    for atoms in structures:
        atoms = atoms.copy()
        atoms.calc = calc
        energies.append(atoms.get_potential_energy())
        forces.append(atoms.get_forces())
    return np.array(energies), np.concatenate(forces)


def test_starts_as_the_dparallel_model(tmp_path: Path, source: Path) -> None:
    """Built on a store of other structures (other statistics and reference energies), the
    model predicts what the source's calculator does: its scaling and offsets are kept."""
    import ase.io

    store = _store(tmp_path, "b", 11)
    spec = TrainingSpec(init_from=str(source), seed=5)
    built = _built(store, spec, tmp_path / "built")
    structures = ase.io.read(tmp_path / "b.xyz", ":6")
    e_new, f_new = _predictions(built, structures)
    e_src, f_src = _predictions(source, structures)
    np.testing.assert_allclose(e_new, e_src, rtol=1e-13)
    np.testing.assert_allclose(f_new, f_src, rtol=0, atol=1e-12 * np.abs(f_src).max())


def test_starts_as_the_n2p2_potential(tmp_path: Path) -> None:
    """From an n2p2 potential folder (its input.nn's ``use_old_weights_short``, through
    ``InputNN.training_options()``, as ``--config input.nn`` reads it), the model before its
    first update gives n2p2's nnp-dataset energies and forces (the folder's scaling.data,
    atom and mean energies)."""
    import ase.io

    from dparallel.n2p2.binaries import find_bin_dir

    if find_bin_dir() is None:
        pytest.skip("n2p2 is not built: run ../shared/n2p2/build.sh (or set N2P2_BIN)")

    from dparallel.n2p2 import write_input_data
    from dparallel.n2p2.symmetry_functions import acsf_from_input_nn

    pot = n2p2_potential(tmp_path / "pot")
    structures = alloy_structures(6)
    for atoms in structures:
        atoms.get_forces()  # labels written with them
    ase.io.write(tmp_path / "alloy.xyz", structures, format="extxyz")
    store = build_store(
        tmp_path / "alloy.xyz", tmp_path / "alloy.zarr", acsf_from_input_nn(pot / "input.nn")
    )
    with (pot / "input.nn").open("a") as f:
        f.write("use_old_weights_short\n")  # as n2p2 would train on: init_from the folder
    # as `dparallel train --config input.nn` reads it (InputNN.training_options())
    spec = parse_training_spec(pot / "input.nn", ["validation_fraction=0", "test_fraction=0"])
    assert spec.init_from == pot
    assert {"scaling", "scale_min", "scale_max"} <= spec.model_fields_set  # n2p2's own: kept
    built = _built(store, spec, tmp_path / "built")
    write_input_data(pot / "input.data", structures)
    ref_e, ref_f = nnp_dataset(pot)
    energy, forces = _predictions(built, structures)
    assert_same(energy, forces, ref_e, ref_f, rtol=1e-10)


def test_tuned_from_an_n2p2_potential_and_exported_back_is_what_nnp_dataset_computes(
    tmp_path: Path,
) -> None:
    """The journey from an n2p2 potential: fine-tune (2 epochs), ``export --format n2p2``,
    and n2p2's nnp-dataset on the export gives the tuned model's energies and forces
    (its ``Calculator``), which are no longer the source's."""
    import ase.io

    from dparallel.n2p2.binaries import find_bin_dir

    if find_bin_dir() is None:
        pytest.skip("n2p2 is not built: run ../shared/n2p2/build.sh (or set N2P2_BIN)")

    from dparallel.n2p2 import write_input_data
    from dparallel.n2p2.potential import export_model_dir
    from dparallel.n2p2.symmetry_functions import acsf_from_input_nn

    pot = n2p2_potential(tmp_path / "pot")
    structures = alloy_structures(6)
    for atoms in structures:
        atoms.get_forces()
    ase.io.write(tmp_path / "alloy.xyz", structures, format="extxyz")
    acsf = acsf_from_input_nn(pot / "input.nn")
    store = build_store(tmp_path / "alloy.xyz", tmp_path / "alloy.zarr", acsf)
    spec = TrainingSpec(init_from=str(pot), epochs=2, validation_fraction=0.0, test_fraction=0.0)
    train_model(store, tmp_path / "tuned", spec)
    export_model_dir(tmp_path / "tuned", tmp_path / "back")
    for folder in (pot, tmp_path / "back"):
        write_input_data(folder / "input.data", structures)
    ref_e, ref_f = nnp_dataset(tmp_path / "back")
    energy, forces = _predictions(tmp_path / "tuned", structures)
    assert_same(energy, forces, ref_e, ref_f, rtol=1e-10)
    source_e, _ = nnp_dataset(pot)
    assert np.abs(source_e - ref_e).max() > 1e-6  # tuned: other weights than the source's


def test_elements_without_atoms_keep_the_source_networks(tmp_path: Path) -> None:
    """Cu structures only, from a Cu/Ag/Au n2p2 potential: training goes on (a fresh
    training refuses an element without atoms); the Ag and Au networks stay the weights
    files' (read by n2p2's format reader), Cu's is trained."""
    import torch

    from dparallel.n2p2 import load_potential
    from dparallel.n2p2.symmetry_functions import acsf_from_input_nn
    from dparallel.train import load_model

    pot = n2p2_potential(tmp_path / "pot")
    data = write_emt_cu(tmp_path / "cu.xyz", 8, seed=1)
    store = build_store(data, tmp_path / "cu.zarr", acsf_from_input_nn(pot / "input.nn"))
    flat = {"validation_fraction": 0.0, "test_fraction": 0.0, "epochs": 1}
    with pytest.raises(TrainingError, match="no atom of Ag, Au in the training split"):
        train_model(store, tmp_path / "fresh", TrainingSpec(**flat))
    train_model(store, tmp_path / "m", TrainingSpec(init_from=str(pot), **flat))
    trained, _ = load_model(tmp_path / "m", dtype=torch.float64)
    _, start = load_potential(pot)
    for e in ("Cu", "Ag", "Au"):
        now, then = trained.nets[e].state_dict(), start.nets[e].state_dict()
        same = all(torch.equal(now[k], then[k]) for k in then)
        assert same == (e != "Cu"), e


def test_fine_tuning_beats_a_random_start(tmp_path: Path, source: Path) -> None:
    """One epoch on related data (other EMT Cu structures): from the source model the test
    error is lower than from a random start with the same seed."""
    store = _store(tmp_path, "c", 29, n=16)
    base = {**_SOURCE, "epochs": 1, "seed": 2}
    fresh = train_model(store, tmp_path / "fresh", TrainingSpec(**base))
    tuned = train_model(store, tmp_path / "tuned", TrainingSpec(init_from=str(source), **base))
    assert tuned.test["energy_rmse"] < fresh.test["energy_rmse"]
    assert tuned.test["force_rmse"] < fresh.test["force_rmse"]
    # the model it started from, recorded (dparallel run retrains once that one changes)
    assert started_from(tmp_path / "tuned") == model_fingerprint(source) is not None
    assert started_from(tmp_path / "fresh") is None


def test_refuses_other_descriptors(tmp_path: Path, source: Path) -> None:
    store = _store(tmp_path, "d", 11, n=8, acsf=small_acsf(r_cut=4.5))
    spec = TrainingSpec(init_from=str(source))
    said = r"model\.pt \(features\.Cu\[0\]\.rc: 4\.0 → 4\.5; .* 3 more\)"
    how = r": featurize the data with the model's descriptors \(a workflow with training.init"
    with pytest.raises(TrainingError, match=r"descriptors are not those of .*" + said + how):
        prepare_and_build(store, spec)


def test_refuses_elements_the_model_lacks(tmp_path: Path, source: Path) -> None:
    from dparallel.descriptors import ACSF

    data = write_emt_alloy(tmp_path / "cuau.xyz", 6, seed=1)
    acsf = ACSF.uniform(["Cu", "Au"], r_cut=4.0, radial=[(0.05, 0.0)], narrow=[])
    store = build_store(data, tmp_path / "cuau.zarr", acsf)
    spec = TrainingSpec(init_from=str(source), validation_fraction=0.0, test_fraction=0.0)
    with pytest.raises(TrainingError, match=r"element\(s\) Au, which the model of .*model\.pt"):
        prepare_and_build(store, spec)


def prepare_and_build(store: Store, spec: TrainingSpec) -> None:
    build_model(prepare(store, spec), spec, Target.of(spec))


@pytest.mark.parametrize(
    ("key", "value"),
    [("hidden", (16,)), ("activation", "silu"), ("scaling", "minmax"), ("scale_min", -1.0)],
)
def test_refuses_other_architecture_keys(source: Path, key: str, value: object) -> None:
    """An architecture key set to other than the model's is refused by name; set to the
    model's own, or left out, it is accepted."""
    loaded = load_source(source)
    with pytest.raises(TrainingError, match=rf"model's {key} .* the spec sets .*drop {key}"):
        check_spec(TrainingSpec(init_from=str(source), **{key: value}), loaded)
    check_spec(TrainingSpec(init_from=str(source), hidden=(8,), activation="tanh"), loaded)
    check_spec(TrainingSpec(init_from=str(source)), loaded)


def test_an_architecture_key_set_to_null_is_left_out(source: Path) -> None:
    """A workflow (the quickstart) sets hidden and scaling; ``--set`` cannot remove a key,
    so ``null`` drops it: the source's own are kept, no refusal."""
    quickstart = {"hidden": [48, 48], "scaling": "center_sigma", "activation": "tanh"}
    given = ["hidden=null", "scaling=null", f"init_from={source}"]
    with pytest.raises(TrainingError, match=r"hidden is \[8\], the spec sets \[48, 48\]: drop"):
        check_spec(parse_training_spec(quickstart, given[2:]), load_source(source))
    spec = parse_training_spec(quickstart, given)
    assert not {"hidden", "scaling"} & spec.model_fields_set
    check_spec(spec, load_source(source))


def test_refuses_another_descriptor_type(source: Path) -> None:
    with pytest.raises(TrainingError, match=r"model\.pt was trained on 'acsf'.*neighbor_sum"):
        check_spec(
            TrainingSpec(init_from=str(source), descriptor="neighbor_sum"), load_source(source)
        )


def test_refuses_a_missing_source(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match=r"init_from: .*nothere does not exist"):
        load_source(tmp_path / "nothere")


def test_refuses_an_n2p2_potential_without_its_scaling_data(tmp_path: Path) -> None:
    from dparallel.errors import SourceNotFoundError

    pot = n2p2_potential(tmp_path / "pot")
    (pot / "scaling.data").unlink()
    with pytest.raises(SourceNotFoundError, match=r"pot/scaling\.data is missing"):
        load_source(pot)


def test_init_from_is_a_training_key_everywhere() -> None:
    """``--set init_from=PATH``, a workflow's training: section and the Python API."""
    assert parse_training_spec(None, ["init_from=/m/x"]).init_from == Path("/m/x")
    assert parse_training_spec(None, ["training.init_from=/m/x"]).init_from == Path("/m/x")
    workflow = {"name": "w", "training": {"init_from": "runs/cu"}}
    assert parse_training_spec(workflow).to_dict()["init_from"] == "runs/cu"
    assert TrainingSpec(init_from=Path("m")).init_from == Path("m")
    assert TrainingSpec().init_from is None


def test_train_command_starts_from_a_model_and_resumes(
    tmp_path: Path, source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``dparallel train --set init_from=PATH``: a conflicting key is one line naming it;
    a run stopped after its first epoch resumes with --resume (the source read again)."""
    from dparallel.cli.main import main

    store = _store(tmp_path, "e", 13, n=8)
    base = ["train", str(store.path), "-o", str(tmp_path / "m"), "-q", "--set"]
    setting = [f"init_from={source}", "--set", "validation_fraction=0", "--set", "hidden=[4]"]
    assert main([*base, *setting]) == 2
    err = capsys.readouterr().err.strip()
    assert "model.pt: its model's hidden is [8], the spec sets [4]: drop hidden" in err
    assert len(err.splitlines()) == 1
    setting = setting[:-2]
    assert main([*base, *setting, "--set", "epochs=1"]) == 0
    assert main([*base, *setting, "--set", "epochs=2", "--resume"]) == 0
    metrics = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert [row["epoch"] for row in metrics["epochs"]] == [0, 1]


def test_training_into_the_source_is_refused_before_removing_it(
    tmp_path: Path, source: Path
) -> None:
    """A new run empties its MODEL_DIR: init_from that folder (or a folder in it) would
    delete the model it starts from; refused, the source left as it was."""
    from dparallel.errors import UnsafePathError

    store = _store(tmp_path, "f", 13, n=8)
    before = sorted(p.name for p in source.iterdir())
    for given in (source, source / "n2p2"):
        spec = TrainingSpec(init_from=given, epochs=1)
        with pytest.raises(UnsafePathError, match=f"{source}.*(is|holds) {given}, which this"):
            train_model(store, source, spec)
    assert sorted(p.name for p in source.iterdir()) == before


def test_spec_refused_before_the_pass_over_the_store(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conflicting key is said before the store is read (a pass over a large store)."""
    import dparallel.train.loop as loop

    store = _store(tmp_path, "g", 13, n=4)

    def no_pass(*args: object) -> None:
        raise AssertionError("the store was read before the spec was checked")

    monkeypatch.setattr(loop, "prepare", no_pass)
    with pytest.raises(TrainingError, match="its model's activation is 'tanh'"):
        train_model(store, tmp_path / "m", TrainingSpec(init_from=source, activation="silu"))


def test_the_source_is_recorded_however_named_and_a_changed_one_is_not_resumed(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``init_from`` as ``~/…`` or as its ``model.pt``: the marker records that model's
    fingerprint (what ``dparallel run`` compares to reuse a model); once the source is
    trained again, resuming the run that started from the old one is refused."""
    monkeypatch.setenv("HOME", str(tmp_path))
    copy = tmp_path / "src"
    shutil.copytree(source, copy)
    store = _store(tmp_path, "f", 17, n=8)
    base = {**_SOURCE, "epochs": 1}
    train_model(store, tmp_path / "m", TrainingSpec(init_from="~/src", **base))
    train_model(store, tmp_path / "n", TrainingSpec(init_from="~/src/model.pt", **base))
    assert started_from(tmp_path / "m") == started_from(tmp_path / "n") == model_fingerprint(copy)
    assert model_fingerprint(copy) is not None
    train_model(store, copy, TrainingSpec(**base))  # the source trained again
    again = TrainingSpec(init_from="~/src", **{**base, "epochs": 2})
    with pytest.raises(CheckpointMismatchError, match="started from another model"):
        train_model(store, tmp_path / "m", again, resume=True)


def test_a_source_named_by_its_file_protects_its_folder(tmp_path: Path) -> None:
    from dparallel.errors import UnsafePathError
    from dparallel.train.model_dir import check_model_dir

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "model.pt").write_bytes(b"a model")
    with pytest.raises(UnsafePathError, match="which this run reads"):
        check_model_dir(tmp_path / "src" / "sub", None, tmp_path / "src" / "model.pt")


def test_resuming_with_init_from_added_is_refused_and_records_nothing(
    tmp_path: Path, source: Path
) -> None:
    """The run started without init_from: --resume naming one is refused before the
    marker is written (it recorded the new source, then the checkpoint's check refused)."""
    store = _store(tmp_path, "g", 19, n=8)
    base = {**_SOURCE, "epochs": 1}
    train_model(store, tmp_path / "m", TrainingSpec(**base))
    again = TrainingSpec(init_from=str(source), **{**base, "epochs": 2})
    with pytest.raises(CheckpointMismatchError, match="started without init_from, this run"):
        train_model(store, tmp_path / "m", again, resume=True)
    assert started_from(tmp_path / "m") is None
