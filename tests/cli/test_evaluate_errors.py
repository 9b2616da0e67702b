"""``dparallel evaluate``'s errors come from training's ``Metrics`` (it had a copy of
their sums) and equal numpy's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
from ase import Atoms
from ase.calculators.singlepoint import SinglePointCalculator
from ase.io import read, write

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path


class _Model:
    """Predictions made from the positions: energy Σ sin(x), forces cos(positions)."""

    def predict(self, batch, forces: bool = True) -> dict[str, np.ndarray]:  # noqa: ANN001
        per_atom = np.sin(batch.positions).sum(axis=1)
        energy = np.add.reduceat(per_atom, batch.offsets[:-1]) if len(per_atom) else per_atom
        return {"energy": energy, "forces": np.cos(batch.positions)}


def _reference(path: Path) -> dict[str, float]:
    """The errors by numpy from ASE's reading of the file."""
    de, df = [], []
    for atoms in read(path, ":"):
        pos = atoms.positions
        de.append((np.sin(pos).sum() - atoms.get_potential_energy()) / len(atoms))
        df.append(np.cos(pos) - atoms.get_forces())
    e, f = np.array(de), np.concatenate(df).ravel()
    return {
        "energy_rmse": float(np.sqrt(np.mean(e**2))),
        "energy_mae": float(np.mean(np.abs(e))),
        "force_rmse": float(np.sqrt(np.mean(f**2))),
        "force_mae": float(np.mean(np.abs(f))),
    }


def _labelled(rng: np.random.Generator, sizes: Iterable[int]) -> list[Atoms]:
    """Cu structures of ``sizes`` atoms at random places, random energies and forces."""
    frames = []
    for n in sizes:
        atoms = Atoms(["Cu"] * n, positions=rng.uniform(0, 6, (n, 3)), cell=[8, 8, 8], pbc=True)
        atoms.calc = SinglePointCalculator(
            atoms, energy=float(rng.normal(0, 2)), forces=rng.normal(0, 1, (n, 3))
        )
        frames.append(atoms)
    return frames


def test_evaluate_errors_equal_numpys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dparallel.cli.evaluate import evaluate_file

    frames = _labelled(np.random.default_rng(3), (1, 3, 5, 2, 4, 6, 2))
    path = tmp_path / "d.extxyz"
    write(path, frames)
    from dparallel.train.reporting import Metrics

    summaries = []
    summary = Metrics.summary
    monkeypatch.setattr(Metrics, "summary", lambda self: summaries.append(1) or summary(self))
    monkeypatch.setattr("dparallel.deploy.load_deployed", lambda _, **kw: _Model())
    got = evaluate_file(str(tmp_path), str(path), batch=3)
    assert summaries == [1], "evaluate computed its errors without training's Metrics"
    assert got.pop("n_structures") == len(frames)
    want = _reference(path)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=0), key


def _frames(energy: bool, forces: bool) -> list[Atoms]:
    out = []
    for n in (2, 3):
        atoms = Atoms(["Cu"] * n, positions=np.arange(3 * n).reshape(n, 3) * 1.1)
        results = {"energy": -1.0 * n} if energy else {}
        if forces:
            results["forces"] = np.zeros((n, 3))
        if results:
            atoms.calc = SinglePointCalculator(atoms, **results)
        out.append(atoms)
    return out


def test_data_without_energies_and_forces_is_one_error_not_a_table_of_nan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # unlabelled structures printed "energy nan nan meV/atom" and exited 0
    from dparallel.cli.main import main

    monkeypatch.setattr("dparallel.deploy.load_deployed", lambda _, **kw: _Model())
    path = tmp_path / "plain.extxyz"
    write(path, _frames(energy=False, forces=False))
    assert main(["evaluate", str(tmp_path), str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"dparallel evaluate: error: {path}: no energies and no forces to compare the model "
        "with (2 structures read; keys other than energy/forces: --energy-key, --forces-key; "
        "docs/io.md)\n"
    )


def test_data_with_energies_only_says_so_in_the_force_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dparallel.cli.main import main

    monkeypatch.setattr("dparallel.deploy.load_deployed", lambda _, **kw: _Model())
    path = tmp_path / "energies.extxyz"
    write(path, _frames(energy=True, forces=False))
    assert main(["evaluate", str(tmp_path), str(path)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[2].startswith("energy ") and "nan" not in rows[2]
    assert rows[3] == f"force             —          — meV/Å (no forces in {path})"
    assert main(["evaluate", str(tmp_path), str(path), "--json"]) == 0
    assert '"force_rmse_meV_per_A": null' in capsys.readouterr().out


def test_evaluate_reads_the_labels_under_the_keys_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reference: numpy's errors against ASE's reading of the keys (info / arrays)."""
    import json

    from dparallel.cli.main import main

    monkeypatch.setattr("dparallel.deploy.load_deployed", lambda _, **kw: _Model())
    rng = np.random.default_rng(8)
    frames = _frames(energy=False, forces=False)
    for atoms in frames:
        atoms.info["dft_energy"] = float(rng.normal())
        atoms.arrays["dft_forces"] = rng.normal(size=(len(atoms), 3))
    path = tmp_path / "dft.extxyz"
    write(path, frames)
    keys = ["--energy-key", "dft_energy", "--forces-key", "dft_forces"]
    assert main(["evaluate", str(tmp_path), str(path), "--json", *keys]) == 0
    got = json.loads(capsys.readouterr().out)
    de, df = [], []
    for atoms in read(path, ":"):
        de.append((np.sin(atoms.positions).sum() - atoms.info["dft_energy"]) / len(atoms))
        df.append(np.cos(atoms.positions) - atoms.arrays["dft_forces"])
    e, f = np.array(de), np.concatenate(df).ravel()
    assert got["energy_rmse_meV_per_atom"] == pytest.approx(1e3 * np.sqrt(np.mean(e**2)))
    assert got["force_mae_meV_per_A"] == pytest.approx(1e3 * np.mean(np.abs(f)))


def test_data_of_another_format_read_in_the_training_datas_units_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A model trained from an n2p2 input.data in Bohr/Hartree read an extxyz given to
    evaluate as Bohr/Hartree too, silently; now it says so and how to read it in Å and eV
    (data of the training data's own format is read in its units without a word)."""
    import json

    from dparallel.cli.evaluate import _data_units

    model = tmp_path / "model"
    model.mkdir()
    doc = {"data_units": "bohr-hartree", "data_format": "n2p2", "store": "s.zarr"}
    (model / "data_units.json").write_text(json.dumps(doc))
    write(tmp_path / "x.extxyz", Atoms("H", positions=[[0, 0, 0]]), format="extxyz")
    (tmp_path / "input.data").write_text("begin\natom 0 0 0 H 0 0 0 0 0\nend\n")
    with caplog.at_level("WARNING"):
        assert _data_units(str(model), str(tmp_path / "input.data"), None, None) == "bohr-hartree"
    assert not caplog.records
    with caplog.at_level("WARNING"):
        assert _data_units(str(model), str(tmp_path / "x.extxyz"), None, None) == "bohr-hartree"
    assert (
        "(format n2p2); this file's format is extxyz: if its numbers are in Å and eV, give "
        "--units ase" in caplog.text
    )
    caplog.clear()
    with caplog.at_level("WARNING"):  # given: that is DATA's units
        assert _data_units(str(model), str(tmp_path / "x.extxyz"), None, "ase") == "ase"
    assert "give --units ase" not in caplog.text


class _Counting(_Model):
    """:class:`_Model` that records each batch's size; a structure of ``n_bad`` atoms
    predicts NaN forces (a model outside its training)."""

    def __init__(self, n_bad: int = 0) -> None:
        self.sizes: list[int] = []
        self.n_bad = n_bad

    def predict(self, batch, forces: bool = True) -> dict[str, np.ndarray]:  # noqa: ANN001
        self.sizes.append(batch.n_structures)
        out = super().predict(batch, forces)
        for s in np.flatnonzero(batch.atom_counts == self.n_bad):
            out["forces"][batch.offsets[s] : batch.offsets[s + 1]] = np.nan
        return out


def test_a_split_is_evaluated_in_full_batches_and_names_structures_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--split: the split's structures, scattered over the file, are predicted in batches
    of up to ``batch`` (one per structure before: half the speed), their errors equal
    numpy's over them alone, and a failure names the structure's index in the file."""
    import json

    from dparallel.cli.evaluate import evaluate_file
    from dparallel.errors import NonFiniteError

    sizes = [1 + k % 4 if k != 13 else 7 for k in range(20)]  # structure 13 alone has 7 atoms
    frames = _labelled(np.random.default_rng(5), sizes)
    path = tmp_path / "d.extxyz"
    write(path, frames)
    ids = [1, 2, 3, 6, 9, 13, 14, 19]
    model = tmp_path / "model"
    model.mkdir()
    doc = {"test_ids": ids, "data": {"structures_in_source": len(frames)}}
    (model / "metrics.json").write_text(json.dumps(doc))
    write(tmp_path / "test.extxyz", [frames[i] for i in ids])
    counting = _Counting()
    monkeypatch.setattr("dparallel.deploy.load_deployed", lambda _, **kw: counting)
    got = evaluate_file(str(model), str(path), batch=3, split="test")
    assert counting.sizes == [3, 3, 2]
    assert got.pop("n_structures") == len(ids)
    for key, value in _reference(tmp_path / "test.extxyz").items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=0), key
    monkeypatch.setattr("dparallel.deploy.load_deployed", lambda _, **kw: _Counting(n_bad=7))
    with pytest.raises(NonFiniteError, match=r"d.extxyz: structure 13, atom 0 "):
        evaluate_file(str(model), str(path), batch=3, split="test")
