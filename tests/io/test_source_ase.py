"""Formats read through ASE (traj, db, LAMMPS dumps, VASP, cif): what a source reads equals
what ``ase.io.read`` gives, labels absent where the file holds none, the planner's view."""

from __future__ import annotations

import contextlib
import pickle
import re
from pathlib import Path

import ase
import ase.io
import numpy as np
import pytest
from ase.build import bulk, molecule
from ase.calculators.emt import EMT
from ase.calculators.singlepoint import SinglePointCalculator

from dparallel.errors import InputFormatError
from dparallel.io import open_source


def _lammps_dump(path, rng, frames=3, columns="id element x y z fx fy fz"):
    """A LAMMPS text dump (``dump custom``) of ``frames`` frames with forces."""
    text = []
    for step in range(frames):
        n = 3 + step
        text.append(
            f"ITEM: TIMESTEP\n{10 * step}\nITEM: NUMBER OF ATOMS\n{n}\n"
            f"ITEM: BOX BOUNDS pp pp pp\n0 5.0\n0 5.5\n0 6.0\nITEM: ATOMS {columns}\n"
        )
        for i in range(n):
            x, f = rng.uniform(0, 5, 3), rng.normal(size=3)
            text.append(f"{i + 1} Cu {x[0]} {x[1]} {x[2]} {f[0]} {f[1]} {f[2]}\n")
    path.write_text("".join(text))


def test_a_lammps_dump_has_no_energy(tmp_path, rng):
    """ASE attaches energy=0.0 to a dump's forces (ase/io/lammpsrun.py), an energy the file
    does not hold: read as absent (NaN), the forces and everything else as ASE reads them;
    an energy key chosen is then missing, not 0."""
    path = tmp_path / "md.lammpstrj"
    _lammps_dump(path, rng)
    got = open_source(path, "lammps-dump-text").read()
    ref = ase.io.read(path, ":", format="lammps-dump-text")
    assert [a.get_potential_energy() for a in ref] == [0.0] * 3  # ASE's placeholder
    np.testing.assert_array_equal(got.energy, [np.nan] * 3)
    np.testing.assert_array_equal(got.forces, np.concatenate([a.get_forces() for a in ref]))
    np.testing.assert_array_equal(got.positions, np.concatenate([a.positions for a in ref]))
    np.testing.assert_array_equal(got.numbers, np.concatenate([a.numbers for a in ref]))
    np.testing.assert_array_equal(got.cells, [a.cell[:] for a in ref])
    with pytest.raises(InputFormatError, match=r"structure 0: no energy under energy_key"):
        open_source(path, "lammps-dump-text", energy_key="energy").read()


def _mixed_frames() -> list[ase.Atoms]:
    """Bulk (strained), a slab (periodic in two directions) and molecules, EMT-labelled."""
    cu = bulk("Cu", "fcc", a=3.6, cubic=True)
    cu.set_cell(cu.cell[:] @ [[1.02, 0.01, 0], [0, 0.99, 0], [0, 0.03, 1.0]], scale_atoms=True)
    slab = bulk("Cu", "fcc", a=3.6, cubic=True).repeat((1, 1, 2))
    slab.center(vacuum=4.0, axis=2)
    slab.pbc = [True, True, False]
    frames = [cu, slab, molecule("CH4"), molecule("H2O"), bulk("Ni", "fcc", a=3.5)]
    for atoms in frames:
        atoms.calc = EMT()
        atoms.calc = SinglePointCalculator(
            atoms, energy=atoms.get_potential_energy(), forces=atoms.get_forces()
        )
    return frames


@pytest.mark.parametrize("suffix", ["traj", "db"])
def test_the_planner_sees_cells_of_ase_formats(tmp_path, suffix):
    """The index of a .traj / .db holds each structure's periodic directions and volume, as
    the extxyz indexer reads them from the same structures' comment lines (molecules were
    planned as dense solids: "unknown")."""
    frames = _mixed_frames()
    ase.io.write(tmp_path / "ref.extxyz", frames)
    ase.io.write(tmp_path / f"data.{suffix}", frames)
    ref = open_source(tmp_path / "ref.extxyz").index
    got = open_source(tmp_path / f"data.{suffix}").index
    np.testing.assert_array_equal(got.periodic, ref.periodic)
    np.testing.assert_array_equal(got.periodic, [3, 2, 0, 0, 3])
    np.testing.assert_allclose(got.volumes, ref.volumes, rtol=1e-12)
    np.testing.assert_array_equal(got.counts, [len(a) for a in frames])


def _cu_frames(n: int) -> list[ase.Atoms]:
    """``n`` rattled Cu cells of one shape (an XDATCAR holds one cell), EMT-labelled."""
    frames = []
    for k in range(n):
        atoms = bulk("Cu", "fcc", a=3.6, cubic=True)
        atoms.rattle(0.05, seed=k)
        atoms.calc = EMT()
        atoms.calc = SinglePointCalculator(
            atoms, energy=atoms.get_potential_energy(), forces=atoms.get_forces()
        )
        frames.append(atoms)
    return frames


def _assert_as_ase_reads(got, ref: list[ase.Atoms]) -> None:
    """``got`` (a batch) holds ``ref``'s structures, labels as ``get_potential_energy`` /
    ``get_forces`` give them (NaN where they raise)."""

    def label(atoms: ase.Atoms, name: str, shape: tuple[int, ...]) -> np.ndarray:
        try:
            return np.asarray(getattr(atoms, name)(), np.float64)
        except Exception:  # noqa: BLE001 - no calculator, or none with this label
            return np.full(shape, np.nan)

    assert got.n_structures == len(ref)
    np.testing.assert_array_equal(got.numbers, np.concatenate([a.numbers for a in ref]))
    np.testing.assert_array_equal(got.positions, np.concatenate([a.positions for a in ref]))
    np.testing.assert_array_equal(got.cells, [a.cell[:] for a in ref])
    np.testing.assert_array_equal(got.pbc, [a.pbc for a in ref])
    np.testing.assert_array_equal(got.energy, [label(a, "get_potential_energy", ()) for a in ref])
    forces = [label(a, "get_forces", (len(a), 3)) for a in ref]
    np.testing.assert_array_equal(got.forces, np.concatenate(forces))


@pytest.mark.parametrize("fmt", ["vasp-xdatcar", "cif"])
def test_a_partition_of_a_sequential_format_parses_only_its_structures(tmp_path, fmt):
    """ASE reads an XDATCAR or a cif from its start (every structure of it): a task reading
    the last structure built all 60 (O(partitions × file) in all); from the index pass's
    random-access copy it builds its own, and reads what ASE reads."""
    path = tmp_path / f"data.{fmt}"
    ase.io.write(path, _cu_frames(60), format=fmt)
    source = pickle.loads(pickle.dumps(open_source(path, fmt)))  # a task's copy
    built = []
    real = ase.Atoms.__init__

    def count(self, *args, **kwargs):
        built.append(1)
        real(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ase.Atoms, "__init__", count)
        last = source.read(59, 60)
    assert len(built) <= 4  # the structure (and its calculator's copy), not 60
    ref = ase.io.read(path, ":", format=fmt)
    _assert_as_ase_reads(last, ref[59:])
    _assert_as_ase_reads(source.read(0, 60), ref)
    _assert_as_ase_reads(source.read(17, 31), ref[17:31])


VASP_DATA = Path(ase.__file__).parent / "test" / "testdata" / "vasp"


def _vasprun(path: Path, frames: int) -> None:
    """ASE's vasprun_pstress.xml with its one ionic step repeated ``frames`` times, each
    with its energies shifted by its number (to tell the steps apart)."""
    text = (VASP_DATA / "vasprun_pstress.xml").read_text()
    a, b = text.index("<calculation>"), text.index("</calculation>") + len("</calculation>")

    def shifted(k: int) -> str:
        energy = re.compile(r'(<i name="e_(?:fr|0)_energy">\s*)(\S+)')
        return energy.sub(lambda m: f"{m.group(1)}{float(m.group(2)) + k:.8f}", text[a:b])

    path.write_text(text[:a] + "\n".join(shifted(k) for k in range(frames)) + text[b:])


@pytest.mark.skipif(
    not (VASP_DATA / "vasprun_pstress.xml").is_file(),  # ASE ships it from 3.28
    reason="ASE's test data (vasprun_pstress.xml) is not installed",
)
@pytest.mark.parametrize("energy_key", [None, "free_energy"])
def test_vasp_outputs_read_as_ase_reads_them(tmp_path, energy_key):
    """vasprun.xml (4 ionic steps) and OUTCAR, read in partitions by a task's copy of the
    source: ASE's energy (sigma → 0) by default, its free energy (TOTEN) when chosen, its
    forces; stress is not read."""
    _vasprun(tmp_path / "vasprun.xml", 4)
    (tmp_path / "OUTCAR").write_bytes((VASP_DATA / "OUTCAR_example_1").read_bytes())
    for name, fmt in (("vasprun.xml", "vasp-xml"), ("OUTCAR", "vasp-out")):
        path = tmp_path / name
        source = pickle.loads(pickle.dumps(open_source(path, energy_key=energy_key)))
        assert source.format == fmt
        ref = ase.io.read(path, ":", format=fmt)
        if energy_key is not None:
            for atoms in ref:
                atoms.calc.results["energy"] = atoms.calc.results[energy_key]
        cut = len(ref) // 2
        _assert_as_ase_reads(source.read(cut, len(ref)), ref[cut:])
        _assert_as_ase_reads(source.read(0, len(ref)), ref)
    assert len(ref) == 1 and len(ase.io.read(tmp_path / "vasprun.xml", ":")) == 4


def _readable(path: Path) -> int:
    """How many structures ``ase.io.iread`` gives before it raises."""
    n = 0
    with contextlib.suppress(Exception):
        for _ in ase.io.iread(path, ":"):
            n += 1
    return n


@pytest.mark.parametrize("suffix", ["traj", "db"])
@pytest.mark.parametrize("damage", ["truncate", "garble"])
def test_a_damaged_traj_or_db_names_file_and_structure(tmp_path, suffix, damage):
    """ASE's own error, as an InputFormatError naming the file and the first structure ASE
    cannot read (the ones before it read)."""
    path = tmp_path / f"data.{suffix}"
    ase.io.write(path, _cu_frames(40))
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 4]
    else:
        cut = len(data) // 2 if suffix == "traj" else 4096
        data[cut : cut + 400] = b"\xff" * 400
    path.write_bytes(bytes(data))
    frame = _readable(path)
    assert frame < 40
    with pytest.raises(InputFormatError) as err:
        open_source(path)
    said = f"{path}, structure {frame}: ASE cannot read it as {suffix!r}: "
    assert str(err.value).startswith(said)


@pytest.mark.parametrize("columns", ["id type x y z fx fy fz", "id element x y z fx fy fz"])
def test_a_lammps_dump_without_elements_is_warned_about(tmp_path, rng, caplog, columns):
    """ASE reads a dump's atom types as atomic numbers where it has no element column: the
    index pass says so, naming the file and the fix; a dump with elements is read quietly."""
    path = tmp_path / "md.lammpstrj"
    _lammps_dump(path, rng, columns=columns)
    if columns.startswith("id type"):
        path.write_text(path.read_text().replace(" Cu ", " 2 "))
    with caplog.at_level("WARNING", logger="dparallel.io._indexers"):
        got = open_source(path, "lammps-dump-text").read()
    ref = ase.io.read(path, ":", format="lammps-dump-text")
    np.testing.assert_array_equal(got.numbers, np.concatenate([a.numbers for a in ref]))
    warned = [r.getMessage() for r in caplog.records if "element column" in r.getMessage()]
    if columns.startswith("id type"):
        assert set(got.numbers) == {2}  # He, as ASE reads it
        assert warned == [
            f"{path}: no element column, so ASE reads atom type 1 as H, 2 as He, "
            "... (atomic numbers); unless that is so, write the dump with an "
            "element column (dump_modify ID element Cu Ni ...)"
        ]
    else:
        assert set(got.numbers) == {29} and not warned
