import dataclasses

import ase
import numpy as np
import pytest
from ase.build import bulk, molecule
from ase.calculators.emt import EMT

from dparallel.types import StructureBatch


def _structures():
    cu = bulk("Cu", "fcc", a=3.6, cubic=True).repeat((2, 1, 1))
    cu.rattle(0.05, seed=1)
    cu.calc = EMT()
    cu.get_forces()
    water = molecule("H2O")
    return [cu, water]


def test_from_ase_roundtrip_keeps_every_field():
    structures = _structures()
    batch = StructureBatch.from_ase(structures)
    assert batch.n_structures == 2
    assert batch.n_atoms == len(structures[0]) + 3
    assert np.isnan(batch.energy[1]) and np.isfinite(batch.energy[0])
    back = StructureBatch.from_ase(batch.to_ase())
    assert back.equals(batch)
    np.testing.assert_array_equal(back.forces[: len(structures[0])], structures[0].get_forces())


def test_select_and_concatenate_are_inverse():
    batch = StructureBatch.from_ase(_structures() * 3)
    parts = [batch.select(0, 2), batch.select(2, 5), batch.select(5, 6)]
    assert StructureBatch.concatenate(parts).equals(batch)
    assert batch.take([1]).equals(batch.select(1, 2))


def test_with_positions_changes_only_the_positions_and_copies_them():
    batch = StructureBatch.from_ase(_structures())
    moved = batch.positions[::-1] + 0.5  # not C-contiguous
    new = batch.with_positions(moved)
    np.testing.assert_array_equal(new.positions, moved)
    assert new.positions.flags.c_contiguous and not np.shares_memory(new.positions, moved)
    assert new.equals(dataclasses.replace(batch, positions=moved))  # validated route
    assert not np.array_equal(batch.positions, moved)  # the batch itself is unchanged
    with pytest.raises(ValueError, match="positions"):
        batch.with_positions(moved[:-1])


def test_inconsistent_batch_is_refused():
    with pytest.raises(ValueError, match="offsets end at 4 but there are 3 atoms"):
        StructureBatch(
            numbers=[1, 1, 8],
            positions=np.zeros((3, 3)),
            cells=np.zeros((1, 3, 3)),
            pbc=np.zeros((1, 3), bool),
            energy=[0.0],
            forces=np.zeros((3, 3)),
            offsets=[0, 4],
        )


def test_shortest_translations_equal_a_minkowski_reduced_cell() -> None:
    """Against ASE's Minkowski reduction (an independent algorithm), with every pattern of
    periodic axes: the shortest periodic translation of reduced cells skewed by one vector
    (found exactly), and of raw random cells, some nearly flat (never shorter than the
    true one: a cell is never refused for a translation it does not have)."""
    import itertools

    from ase.geometry import minkowski_reduce

    rng = np.random.default_rng(4)
    cells, pbcs, expected, raw = [], [], [], []
    for pbc in itertools.product([False, True], repeat=3):
        for k in range(12):
            cell = rng.normal(size=(3, 3)) * rng.uniform(0.2, 4.0)
            if k < 6:  # a reduced cell, skewed: its shortest translation is within ±2
                cell = minkowski_reduce(cell)[0]
                cell[1] += rng.integers(-1, 2) * cell[0]
            raw.append(k >= 6)
            if not any(pbc):
                expected.append(np.inf)
            else:
                reduced, _ = minkowski_reduce(cell, pbc=pbc)
                expected.append(float(np.linalg.norm(reduced[list(pbc)], axis=1).min()))
            cells.append(cell)
            pbcs.append(pbc)
    batch = StructureBatch.from_ase(
        [ase.Atoms("H", cell=c, pbc=p) for c, p in zip(cells, pbcs, strict=True)]
    )
    got, expected, raw = batch.shortest_translations(), np.array(expected), np.array(raw)
    np.testing.assert_allclose(got[~raw], expected[~raw], rtol=1e-12)
    assert np.all(got[raw] >= expected[raw] * (1 - 1e-12))
    assert np.mean(np.isclose(got[raw], expected[raw], rtol=1e-12)) > 0.5


def test_shortest_translations_search_each_distinct_cell_once(monkeypatch) -> None:
    # the search (124 combinations of the cell vectors) ran for every structure, ~14 us
    # each, twice per partition in featurize (the reader's checks, the neighbor list);
    # structures of a file mostly share a few cells: searched once per (cell, pbc)
    from ase.geometry import minkowski_reduce

    rng = np.random.default_rng(5)
    shapes = [minkowski_reduce(rng.normal(size=(3, 3)) * 4)[0] for _ in range(3)]
    patterns = [(True, True, True), (True, True, False), (False, False, False)]
    pick = rng.integers(0, 3, (3000, 2))  # a cell and a pbc pattern per structure
    atoms = [ase.Atoms("H", cell=shapes[c], pbc=patterns[p]) for c, p in pick]
    searched = []
    real = np.einsum
    monkeypatch.setattr(np, "einsum", lambda *a, **k: searched.append(a[2].shape) or real(*a, **k))
    got = StructureBatch.from_ase(atoms).shortest_translations()
    assert searched and all(shape[0] <= 9 for shape in searched)  # distinct (cell, pbc) pairs
    for c in range(3):
        for p, pbc in enumerate(patterns):
            rows = (pick[:, 0] == c) & (pick[:, 1] == p)
            reduced, _ = minkowski_reduce(shapes[c], pbc=pbc)
            want = float(np.linalg.norm(reduced[list(pbc)], axis=1).min()) if any(pbc) else np.inf
            np.testing.assert_allclose(got[rows], want, rtol=1e-12)


def test_from_ase_takes_one_atoms_and_names_what_is_not_one():
    # from_ase(atoms) iterated over its Atom objects: "'Atom' object has no attribute
    # 'info'"; a path or a list with a number in it failed the same way
    from ase.build import bulk

    atoms = bulk("Cu", cubic=True)
    one = StructureBatch.from_ase(atoms)
    assert one.n_structures == 1 and one.equals(StructureBatch.from_ase([atoms]))
    with pytest.raises(TypeError) as refused:
        StructureBatch.from_ase([atoms, 5])
    assert str(refused.value) == "from_ase: structure 1 is a int, not an ase.Atoms"
    with pytest.raises(TypeError, match=r"^from_ase: structure 0 is a str, not an ase.Atoms"):
        StructureBatch.from_ase("train.xyz")


def test_from_ase_reads_the_labels_extxyz_files_give(tmp_path):
    """``info`` keys are labels under the names an extxyz comment line's are (docs/io.md:
    energy, else REF_energy; free_energy is none), so the same structures give one store
    from a .traj and from an .extxyz; free_energy was read as the energy from ASE formats."""
    import ase.io

    from dparallel.io import open_source

    frames = [molecule("H2"), molecule("H2"), molecule("H2")]
    frames[0].info["free_energy"] = -3.0
    frames[1].info["REF_energy"] = -5.0
    frames[2].info.update(energy=-7.0, free_energy=-6.0)
    ase.io.write(tmp_path / "a.traj", frames)
    ase.io.write(tmp_path / "a.extxyz", frames)
    from_traj = open_source(tmp_path / "a.traj").read()
    from_extxyz = open_source(tmp_path / "a.extxyz").read()
    np.testing.assert_array_equal(from_traj.energy, from_extxyz.energy)
    np.testing.assert_array_equal(from_traj.energy, [np.nan, -5.0, -7.0])


def test_from_ase_with_keys_reads_them_and_refuses_a_structure_without_them():
    """Keys given: ``info``/``arrays`` or calculator results under them (the defaults
    beside them are not read); a structure without one is named with what it has."""
    from ase.calculators.singlepoint import SinglePointCalculator

    a, b = molecule("H2"), molecule("H2")
    a.info.update(free_energy=-2.0, energy=9.0)
    a.arrays["dft_forces"] = np.ones((2, 3))
    b.arrays["dft_forces"] = np.full((2, 3), 2.0)
    b.calc = SinglePointCalculator(b, energy=9.0, free_energy=-4.0, forces=np.zeros((2, 3)))
    got = StructureBatch.from_ase([a, b], energy_key="free_energy", forces_key="dft_forces")
    np.testing.assert_array_equal(got.energy, [-2.0, -4.0])
    np.testing.assert_array_equal(got.forces, [[1.0] * 3] * 2 + [[2.0] * 3] * 2)
    with pytest.raises(ValueError, match=r"^from_ase: structure 1: no forces under forces_key "
                       r"'x': its arrays and calculator results are dft_forces, energy, forces, "
                       r"free_energy;.*in ingest and featurize, leave such structures out "
                       r"\(--on-error skip\)$"):  # fmt: skip
        a.arrays["x"] = np.zeros((2, 3))
        StructureBatch.from_ase([a, b], forces_key="x")
