"""Labels an extxyz file holds under keys dparallel does not read by default: said once,
with the option that reads them (``energy_key`` / ``forces_key``), which reads what ASE
reads under those keys; a key given that a structure lacks is that structure's error."""

from __future__ import annotations

import logging
import re

import ase.io
import numpy as np
import pytest

from dparallel.errors import InputError, InputFormatError
from dparallel.io import open_source
from dparallel.types import StructureBatch

_FRAME = "2\n{comment}\nO 0 0 0{f}\nH 0 0 0.97{f}\n"
_P = "Properties=species:S:1:pos:R:3"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize(
    ("comment", "said"),
    [
        (f"{_P}:forces:R:3 free_energy=-1.5", r"free_energy=-1.5 is not read as the energy"),
        (f"{_P}:forces:R:3 dft_energy=-1.5", r"dft_energy=-1.5 is not read as the energy"),
        (f"{_P}:forces:I:3 dft_energy=-1.5", r"dft_energy=-1.5 is not read"),  # ASE's path
        (f"{_P}:force:R:3 energy=-1.5", r"column 'force' is not read as the forces"),
        (f"{_P}:dft_forces:R:3 energy=-1.5", r"column 'dft_forces' is not read as the forces"),
        (
            f"{_P}:REF_forces:R:3 energy=-1.2 REF_energy=-1.5",
            r"both energy=-1.2 and REF_energy=-1.5: dparallel reads energy",
        ),
    ],
)
def test_an_unread_label_is_said_once_naming_file_line_and_fix(tmp_path, caplog, comment, said):
    """ASE leaves these labels out too (``get_potential_energy`` fails, ``get_forces`` is
    absent), so the structures are stored without them; a user whose reference energies are
    under another key learnt that only from training on nothing."""
    path = tmp_path / "labels.xyz"
    path.write_text(_FRAME.format(comment=comment, f=" 1 2 3") * 3)
    with caplog.at_level(logging.WARNING, logger="dparallel.io"):
        batch = open_source(path).read()
        open_source(path).read(1, 3)  # the same file again in this process: not repeated
    for k, atoms in enumerate(ase.io.read(path, ":")):  # stored: what ASE reads as labels
        results = atoms.calc.results if atoms.calc else {}
        assert np.isnan(batch.energy[k]) == ("energy" not in results)
        if "REF_forces" not in comment:
            assert np.isnan(batch.forces[2 * k]).all() == ("forces" not in results)
    said_here = [m for m in _warnings(caplog) if "not read" in m or "both" in m]
    assert len(said_here) == 1, said_here
    assert said_here[0].startswith(f"{path}, line 2, structure 0: "), said_here
    assert re.search(said, said_here[0]), said_here
    assert batch.n_structures == 3
    # the option it names reads the label, as ASE reads it under that key
    kind, key = re.search(r"(energy|forces)_key=(\w+) \(--\1-key \2", said_here[0]).groups()
    chosen = open_source(path, **{f"{kind}_key": key}).read()
    for k, atoms in enumerate(ase.io.read(path, ":")):
        results = atoms.calc.results if atoms.calc else {}
        if kind == "energy":
            assert chosen.energy[k] == atoms.info.get(key, results.get(key))
        else:
            np.testing.assert_array_equal(chosen.forces[2 * k : 2 * k + 2], atoms.arrays[key])


@pytest.mark.parametrize(
    "comment",
    [
        f"{_P}:forces:R:3 energy=-1.5 free_energy=-1.6",  # ASE's own writing of a calculator
        f"{_P}:REF_forces:R:3 REF_energy=-1.5 MACE_energy=-1.4",  # a model's beside the reference
        f"{_P}:REF_forces:R:3 energy=-1.5 REF_energy=-1.5",
        "plain xyz comment",  # no labels at all: nothing to say
    ],
)
def test_labels_read_as_meant_are_not_reported(tmp_path, caplog, comment):
    path = tmp_path / "fine.xyz"
    path.write_text(_FRAME.format(comment=comment, f="" if "plain" in comment else " 1 2 3"))
    with caplog.at_level(logging.WARNING, logger="dparallel.io"):
        batch = open_source(path).read()
    assert _warnings(caplog) == []
    assert np.isfinite(batch.energy).all() == ("energy" in comment)


def test_opening_the_file_says_it_in_the_process_that_opens_it(tmp_path, caplog):
    """``featurize`` reads in Dask workers, whose warnings go to the log file only: opening
    the source (in the process that starts the run) looks at the first structure."""
    path = tmp_path / "labels.xyz"
    path.write_text(_FRAME.format(comment=f"{_P}:forces:R:3 dft_energy=-1.5", f=" 1 2 3"))
    with caplog.at_level(logging.WARNING, logger="dparallel.io"):
        open_source(path)
    assert any("dft_energy=-1.5 is not read" in m for m in _warnings(caplog))


_DFT = (
    '2\nLattice="6 0 0 0 6 0 0 0 6" Properties=species:S:1:pos:R:3:dft_forces:R:3:forces:R:3 '
    'dft_energy={e} energy=9.0 free_energy={f} pbc="T T T"\n'
    "O 0 0 0 {a} 7 7 7\nH 0 0 0.97 {b} 7 7 7\n"
)


def _dft_file(path, n: int = 3, **override: str) -> None:
    rng = np.random.default_rng(5)
    frames = []
    for k in range(n):
        a, b = (" ".join(f"{x:.6f}" for x in rng.normal(size=3)) for _ in range(2))
        fields = {"e": f"{-10.0 - k:.3f}", "f": f"{-20.0 - k:.3f}", "a": a, "b": b}
        frames.append(_DFT.format(**fields).replace(*override.get(str(k), ("", ""))))
    path.write_text("".join(frames))


@pytest.mark.parametrize(
    ("energy_key", "forces_key"),
    [
        ("dft_energy", "dft_forces"),  # extxyz info key and column
        ("free_energy", "dft_forces"),  # ASE moves free_energy into its calculator's results
        ("dft_energy", None),  # forces: the default key
        ("energy", "forces"),  # the default keys given: required
    ],
)
def test_chosen_keys_read_what_ase_reads_under_them(tmp_path, energy_key, forces_key):
    """Reference: ASE's reading of the file, its ``info`` / ``arrays`` / calculator
    results under the keys. The other keys (energy=9, forces 7 7 7) are not read."""
    path = tmp_path / "dft.xyz"
    _dft_file(path)
    batch = open_source(path, energy_key=energy_key, forces_key=forces_key).read()
    frames = ase.io.read(path, ":")
    for k, atoms in enumerate(frames):
        where = {**atoms.info, **atoms.calc.results, **atoms.arrays}
        assert batch.energy[k] == where[energy_key]
        forces = batch.forces[2 * k : 2 * k + 2]
        np.testing.assert_array_equal(forces, where[forces_key or "forces"])
    # from_ase reads the same keys from ASE's structures
    same = StructureBatch.from_ase(frames, energy_key=energy_key, forces_key=forces_key)
    assert same.equals(batch)


def test_chosen_keys_in_an_ase_format(tmp_path):
    """Formats ASE reads (here traj): ``info`` keys and calculator results."""
    from ase.calculators.singlepoint import SinglePointCalculator

    frames = []
    for k in range(3):
        atoms = ase.Atoms("OH", positions=[[0, 0, 0], [0, 0, 0.97]], cell=[6, 6, 6], pbc=True)
        atoms.info["dft_energy"] = -3.0 - k
        forces = np.full((2, 3), 0.5 + k)
        atoms.calc = SinglePointCalculator(atoms, energy=1.0, free_energy=-2.0 - k, forces=forces)
        frames.append(atoms)
    path = tmp_path / "data.traj"
    ase.io.write(path, frames)
    for key in ("dft_energy", "free_energy"):
        batch = open_source(path, energy_key=key, forces_key="forces").read()
        for k, atoms in enumerate(ase.io.read(path, ":")):
            assert batch.energy[k] == {**atoms.info, **atoms.calc.results}[key]
            np.testing.assert_array_equal(batch.forces[2 * k : 2 * k + 2], atoms.get_forces())
    with pytest.raises(InputFormatError, match=r"structure 0: no energy under energy_key 'x'"):
        open_source(path, energy_key="x").read()


@pytest.mark.parametrize(
    ("kind", "override", "has"),
    [
        ("energy", ("dft_energy", "other_energy"), "Lattice, Properties, energy, free_energy"),
        ("forces", ("dft_forces", "dftforces"), "dftforces, forces, pos, species"),
    ],
)
def test_a_structure_without_the_key_given_is_its_error(tmp_path, kind, override, has):
    """Not NaN silently: raise names file, line, structure and the keys it has; skip
    records it and keeps the others."""
    path = tmp_path / "dft.xyz"
    _dft_file(path, **{"1": override})
    keys = {"energy_key": "dft_energy", "forces_key": "dft_forces"}
    with pytest.raises(InputFormatError) as err:
        open_source(path, **keys).read()
    message = str(err.value)
    assert message.startswith(f"{path}, line 6, structure 1: no {kind} under {kind}_key ")
    assert has in message and f"--{kind}-key" in message
    skipping = open_source(path, on_error="skip", **keys)
    assert skipping.read().n_structures == 2
    assert [i for i, _ in skipping.skipped] == [1]
    assert f"line 6: no {kind} under" in skipping.skipped[0][1]


def test_keys_are_refused_for_n2p2_and_checked(tmp_path):
    from dparallel.n2p2 import write_input_data

    path = tmp_path / "input.data"
    write_input_data(path, [ase.Atoms("H2", positions=[[0, 0, 0], [0, 0, 0.7]])], "ase")
    with pytest.raises(InputError, match=r"energy_key cannot be given for an n2p2 file") as err:
        open_source(path, energy_key="dft_energy")
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match=r"forces_key must be a key of the file"):
        open_source(tmp_path / "input.data", format="extxyz", forces_key="two words")
