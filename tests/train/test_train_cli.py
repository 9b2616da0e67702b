"""CLI smoke tests: dparallel train → export → evaluate (in-process main())."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pytest
from _store_fixture import small_store

from dparallel.cli.main import main

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.integration
def test_train_export_evaluate(tmp_path, capsys) -> None:  # noqa: ANN001
    store = small_store(tmp_path, n=16)
    cfg = tmp_path / "train.yaml"
    cfg.write_text("hidden: [6]\nbatch_size: 4\nepochs: 3\n")
    out = tmp_path / "model"
    rc = main(["train", str(store.path), "-o", str(out), "--config", str(cfg),
               "--set", "epochs=2", "--set", "lr=0.01"])  # fmt: skip
    text = capsys.readouterr().out
    assert rc == 0 and "2 epochs run" in text and "model:" in text
    assert "done in" in text and f"dparallel export {out}" in text  # the next steps
    assert json.loads((out / "spec.json").read_text())["epochs"] == 2
    assert main(["export", str(out), "--no-probe"]) == 0
    assert (out / "deployed.pt").is_file()
    capsys.readouterr()
    assert main(["evaluate", str(out), str(tmp_path / "cu16.xyz"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["n_structures"] == 16
    # independent check with the ASE calculator on the same file
    import ase.io

    from dparallel.ase import Calculator

    calc = Calculator(out)
    errs = []
    for atoms in ase.io.read(tmp_path / "cu16.xyz", ":"):
        e_ref = atoms.get_potential_energy()
        errs.append((calc.get_potential_energy(atoms) - e_ref) / len(atoms))
    rmse = float(np.sqrt(np.mean(np.square(errs))))  # eV/atom
    assert res["energy_rmse_meV_per_atom"] == pytest.approx(1e3 * rmse, 1e-9)
    assert main(["evaluate", str(out), str(tmp_path / "cu16.xyz")]) == 0
    assert "meV/atom" in capsys.readouterr().out
    # an element the model does not know, past the first batch: the file and the
    # structure's index in it are named (not its index in the batch of 4)
    frames = ase.io.read(tmp_path / "cu16.xyz", ":")
    frames[9][2].symbol = "Ag"
    ase.io.write(tmp_path / "foreign.xyz", frames)
    assert main(["evaluate", str(out), str(tmp_path / "foreign.xyz"), "--batch", "4"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'foreign.xyz'}: structure 9, atom 2: atomic number 47" in err
    # units of an n2p2 potential given for a dparallel model: refused, not ignored
    argv = ["evaluate", str(out), str(tmp_path / "cu16.xyz"), "--potential-units", "bohr-hartree"]
    assert main(argv) == 2
    assert "--potential-units is for an n2p2 potential directory" in capsys.readouterr().err


@pytest.mark.integration
def test_cli_errors_are_reported(tmp_path, capsys) -> None:  # noqa: ANN001
    assert main(["train", str(tmp_path / "missing.zarr"), "-o", str(tmp_path / "m")]) == 2
    assert "error" in capsys.readouterr().err
    assert main(["train", "x.zarr", "-o", "m", "--set", "bogus=1"]) == 2
    assert "bogus" in capsys.readouterr().err
    assert main(["export", str(tmp_path)]) == 2
    assert "dparallel train" in capsys.readouterr().err


def test_device_option_of_train_and_run(tmp_path, capsys) -> None:  # noqa: ANN001
    import torch

    with pytest.raises(SystemExit):  # argparse refuses a device that is no device
        main(["train", "x.zarr", "-o", "m", "--device", "gpu"])
    assert "device 'gpu': expected auto, cpu, cuda or cuda:N" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "w.yaml", "--device", "tpu"])
    assert "device 'tpu': expected auto, cpu, cuda or cuda:N" in capsys.readouterr().err
    if torch.cuda.is_available():
        return
    store = small_store(tmp_path, n=8)
    rc = main(["train", str(store.path), "-o", str(tmp_path / "m"), "--device", "cuda:0"])
    err = capsys.readouterr().err
    assert rc == 2 and "'cuda:0' asked for" in err and "available: cpu" in err


def test_run_device_option_reaches_the_training_spec(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    import dparallel.cli.run as cli_run

    seen = {}

    def execute(spec, args, protect=()) -> int:  # noqa: ANN001
        seen["spec"] = spec
        return 0

    monkeypatch.setattr(cli_run, "execute", execute)
    from pathlib import Path

    wf = Path(__file__).parents[2] / "workflows" / "quickstart.yaml"
    main(["run", str(wf), "--device", "cpu"])
    assert seen["spec"].training.device == "cpu"
    main(["run", str(wf), "--set", "training.epochs=3"])
    assert seen["spec"].training.device == "auto" and seen["spec"].training.epochs == 3


def _train_failing_at(
    tmp_path, monkeypatch, failing_epoch: int, code: int, needed: int | None = None
) -> tuple[list[str], Path]:  # noqa: ANN001
    """``dparallel train``'s argv and model directory, where writing the checkpoint of
    ``failing_epoch`` fails with ``OSError(code)`` raised on its temporary file."""
    import os

    import dparallel.train.loop as loop
    from dparallel._files import _replacing, temporary_name

    store = small_store(tmp_path, n=16)
    out = tmp_path / "model"
    real = loop.save_checkpoint

    def fail_at_one_epoch(path, epoch, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if epoch != failing_epoch:
            return real(path, epoch, *args, **kwargs)
        tmp = temporary_name(path)
        with _replacing(tmp, path, needed):
            raise OSError(code, os.strerror(code), str(tmp))

    monkeypatch.setattr(loop, "save_checkpoint", fail_at_one_epoch)
    argv = ["train", str(store.path), "-o", str(out), "-q",
            "--set", "hidden=[6]", "--set", "batch_size=4", "--set", "epochs=3"]  # fmt: skip
    return argv, out


@pytest.mark.integration
@pytest.mark.parametrize("failing_epoch", [0, 1])
def test_full_disk_in_train_says_resume(tmp_path, capsys, monkeypatch, failing_epoch) -> None:  # noqa: ANN001
    """A plain rerun of ``dparallel train`` trains anew (and removes the finished epochs):
    a full disk at a checkpoint says ``--resume`` once an epoch is kept, and that rerun
    continues from it."""
    import errno

    argv, out = _train_failing_at(tmp_path, monkeypatch, failing_epoch, errno.ENOSPC, 1234)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no space left on the device (needed 1,234 bytes)" in err
    if failing_epoch == 0:  # nothing to keep: the same command is right
        assert err.endswith("free some space and rerun the same command (no epoch had finished)")
        return
    assert "rerun with --resume to continue from" in err and "rerun the same command" not in err
    monkeypatch.undo()
    assert main([*argv, "--resume"]) == 0
    rows = (out / "metrics.csv").read_text().split()[1:]
    assert [int(row.split(",")[0]) for row in rows] == [0, 1, 2]


@pytest.mark.integration
def test_train_an_ingested_store_with_descriptors_computed(tmp_path, capsys) -> None:  # noqa: ANN001
    """dparallel ingest → dparallel train --descriptors FILE --descriptor-source computed:
    the model of the same descriptors featurized (the store's own statistics), and it
    exports and evaluates; without the descriptors, one line names both fixes."""
    from _store_fixture import build_store, small_acsf

    from dparallel.datasets import write_emt_cu
    from dparallel.nn import load_model
    from dparallel.workflow.descriptors_spec import load_descriptors

    data = write_emt_cu(tmp_path / "cu.xyz", 12, seed=5)
    store = tmp_path / "s.zarr"
    assert main(["ingest", str(data), "-o", str(store), "--partition-atoms", "150"]) == 0
    out = tmp_path / "m"
    assert main(["train", str(store), "-o", str(out), "--set", "epochs=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "featurize its data" in err[0] and "--descriptors FILE" in err[0]
    desc = tmp_path / "descriptors.yaml"
    desc.write_text(  # small_acsf() as a descriptors file
        "acsf:\n  elements: [Cu]\n  r_cut: 4.0\n"
        "  radial: [[0.05, 0.0], [2.0, 2.5], [2.0, 3.0], [2.0, 3.5]]\n"
        "  narrow: [[0.01, 1.0, -1.0, 0.0], [0.01, 1.0, 1.0, 0.0]]\n"
    )
    assert load_descriptors(desc).acsf.to_dict() == small_acsf().to_dict()
    argv = ["train", str(store), "-o", str(out), "--descriptors", str(desc),
            "--set", "epochs=2", "--set", "hidden=[6]", "--quiet"]  # fmt: skip
    assert main(argv) == 2  # stored descriptors asked for: there are none
    assert "--descriptor-source computed" in capsys.readouterr().err
    assert main([*argv, "--descriptor-source", "computed"]) == 0
    assert json.loads((out / "spec.json").read_text())["descriptor_source"] == "computed"
    featurized = build_store(data, tmp_path / "f.zarr", small_acsf(), partition_atoms=150)
    model, _ = load_model(out / "model.pt")
    assert model.scaling is not None
    assert model.scaling["statistics"]["Cu"] == {
        k: featurized.attrs["statistics"]["acsf"]["Cu"][k] for k in ("min", "max", "mean", "sigma")
    }
    assert main(["export", str(out), "--no-probe"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), str(data), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_structures"] == 12
    # a workflow file's descriptors (and training keys): the quickstart's ACSF
    from pathlib import Path

    workflow = Path(__file__).parents[2] / "workflows" / "quickstart.yaml"
    argv = ["train", str(store), "-o", str(tmp_path / "wf"), "--config", str(workflow),
            "--descriptors", str(workflow), "--descriptor-source", "computed",
            "--set", "epochs=1", "--set", "hidden=[4]", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    model, file = load_model(tmp_path / "wf" / "model.pt")
    assert file["descriptor"] == load_descriptors(workflow, workflows=True).acsf.to_dict()
    assert model.n_features["Cu"] > 6  # the quickstart's ACSF, not small_acsf()


@pytest.mark.integration
@pytest.mark.parametrize("failing_epoch", [0, 1])
def test_read_only_model_directory_in_train_names_the_file_and_says_resume(
    tmp_path, capsys, monkeypatch, failing_epoch
) -> None:  # noqa: ANN001
    """The model directory's filesystem remounted read-only mid-run: the error was
    ``Read-only file system: MODEL/checkpoint.pt.<hex>.partial`` (dparallel's temporary
    name), and said nothing of the checkpoint kept or of --resume, as a full disk's does."""
    import errno

    argv, out = _train_failing_at(tmp_path, monkeypatch, failing_epoch, errno.EROFS)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and ".partial" not in err, err
    checkpoint = out / "checkpoint.pt"
    assert err.startswith(f"dparallel train: error: Read-only file system: {checkpoint}; ")
    if failing_epoch == 0:
        assert err.endswith("fix that and rerun the same command (no epoch had finished)")
    else:
        assert f"fix that and rerun with --resume to continue from {checkpoint}" in err
