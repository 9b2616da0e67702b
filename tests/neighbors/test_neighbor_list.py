"""neighbor_list against ase.neighborlist on random, triclinic, small and mixed-pbc cells."""

from __future__ import annotations

import ase
import numpy as np
import pytest
from ase.neighborlist import neighbor_list as ase_nl
from scipy.spatial.transform import Rotation

from dparallel.errors import DescriptorError
from dparallel.neighbors import Neighbors, neighbor_list, select_structures
from dparallel.neighbors._small_cells import SMALL_CELL_ATOMS
from dparallel.types import StructureBatch


def _random_atoms(rng: np.random.Generator, n: int, cell: np.ndarray, pbc) -> ase.Atoms:
    frac = rng.random((n, 3))
    numbers = rng.choice([1, 6, 8], size=n)
    return ase.Atoms(numbers=numbers, scaled_positions=frac, cell=cell, pbc=pbc)


def _as_set(i, j, s, d) -> list:
    return sorted(
        (int(a), int(b), *map(int, sh), round(float(x), 9))
        for a, b, sh, x in zip(i, j, s, d, strict=False)
    )


def _compare(atoms_list: list[ase.Atoms], cutoff: float) -> Neighbors:
    batch = StructureBatch.from_ase(atoms_list)
    nl = neighbor_list(batch, cutoff)
    assert np.all(np.diff(nl.pair_first) >= 0), "pairs must be sorted by pair_first"
    assert nl.pair_first.dtype == np.int64 and nl.shifts.dtype == np.int64
    for s, atoms in enumerate(atoms_list):
        a, b = batch.offsets[s], batch.offsets[s + 1]
        m = (nl.pair_first >= a) & (nl.pair_first < b)
        i, j, S, d, _D = ase_nl("ijSdD", atoms, cutoff)
        ours = _as_set(nl.pair_first[m] - a, nl.pair_second[m] - a, nl.shifts[m], nl.distances[m])
        assert ours == _as_set(i, j, S, d)
        # vectors follow r_j - r_i + S·cell
        pos = atoms.get_positions()
        expect = (
            pos[nl.pair_second[m] - a] - pos[nl.pair_first[m] - a] + nl.shifts[m] @ atoms.cell[:]
        )
        np.testing.assert_allclose(nl.vectors[m], expect, atol=1e-10)
        np.testing.assert_allclose(np.linalg.norm(nl.vectors[m], axis=1), nl.distances[m])
    return nl


@pytest.mark.parametrize("seed", range(4))
def test_random_triclinic_cells_match_ase(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cells = []
    for _ in range(3):
        cell = np.diag(rng.uniform(2.0, 7.0, 3)) + rng.uniform(-1.5, 1.5, (3, 3)) * (1 - np.eye(3))
        cells.append(_random_atoms(rng, int(rng.integers(1, 9)), cell, True))
    _compare(cells, cutoff=float(rng.uniform(3.0, 6.0)))


def test_cell_smaller_than_cutoff_has_self_images_and_duplicates() -> None:
    atoms = ase.Atoms(
        "CuAu",
        scaled_positions=[[0, 0, 0], [0.5, 0.4, 0.3]],
        cell=[[2.1, 0, 0], [0.7, 2.0, 0], [0.3, -0.4, 2.2]],
        pbc=True,
    )
    nl = _compare([atoms], cutoff=5.0)
    self_pairs = nl.pair_first == nl.pair_second
    assert self_pairs.any()
    assert np.all(np.abs(nl.shifts[self_pairs]).sum(1) > 0)
    pairs = list(zip(nl.pair_first, nl.pair_second, strict=False))
    assert len(set(pairs)) < len(pairs)


def test_mixed_pbc_and_non_periodic(rng: np.random.Generator) -> None:
    slab = _random_atoms(rng, 6, np.diag([4.0, 3.5, 10.0]), [True, True, False])
    wire = _random_atoms(rng, 5, np.diag([3.0, 9.0, 9.0]), [True, False, False])
    mol = ase.Atoms("H2O", positions=[[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]])
    _compare([slab, wire, mol], cutoff=4.5)


def test_invariant_under_rotation_and_translation(rng: np.random.Generator) -> None:
    cell = np.diag([3.0, 3.5, 4.0]) + 0.4 * rng.standard_normal((3, 3))
    atoms = _random_atoms(rng, 7, cell, True)
    moved = atoms.copy()
    rot = Rotation.random(random_state=3).as_matrix()
    moved.set_cell(atoms.cell[:] @ rot.T, scale_atoms=False)
    moved.set_positions(atoms.get_positions() @ rot.T + [1.3, -2.0, 0.7])
    a = neighbor_list(StructureBatch.from_ase([atoms]), 5.0)
    b = neighbor_list(StructureBatch.from_ase([moved]), 5.0)
    assert _as_set(a.pair_first, a.pair_second, a.shifts, a.distances) == _as_set(
        b.pair_first, b.pair_second, b.shifts, b.distances
    )
    _compare([moved], 5.0)


def test_empty_batch_and_errors() -> None:
    nl = neighbor_list(StructureBatch.empty(), 3.0)
    assert nl.n_pairs == 0 and nl.vectors.shape == (0, 3)
    bad = ase.Atoms("H2", positions=[[0, 0, 0], [1, 0, 0]], cell=np.zeros((3, 3)), pbc=True)
    with pytest.raises(DescriptorError, match=r"structure 0: periodic .* singular"):
        neighbor_list(StructureBatch.from_ase([bad]), 3.0)
    with pytest.raises(DescriptorError, match="cutoff must be a positive"):
        neighbor_list(StructureBatch.empty(), -1.0)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("pbc", [False, True])
def test_an_atom_without_a_finite_position_is_refused_naming_it(bad: float, pbc: bool) -> None:
    """A NaN coordinate made the atom drop out of the list: ACSF and NeighborSum then gave
    it an isolated atom's features, and its neighbours features without it, silently."""
    from dparallel.descriptors import ACSF, NeighborSum

    good = ase.Atoms("H2O", positions=[[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]])
    broken = ase.Atoms("H2O", positions=[[0, 0, 0], [0.96, 0, 0], [-0.24, bad, 0]])
    if pbc:
        broken.cell, broken.pbc = np.diag([5.0, 5.0, 5.0]), True
    message = r"structure 1: atom 2 is at \[-0.24, (nan|inf), 0.0\], not a finite position"
    with pytest.raises(DescriptorError, match=message):
        neighbor_list(StructureBatch.from_ase([good, broken]), 3.0)
    acsf = ACSF.uniform(["H", "O"], 3.0, radial=[(0.1, 0.0)])
    for compute in (
        lambda s: acsf.compute(s, backend="numba"),
        lambda s: acsf.compute(s, backend="torch"),
        lambda s: acsf.compute_arrays(StructureBatch.from_ase(s)),
        lambda s: NeighborSum(["H", "O"], 3.0).compute(s),
    ):
        with pytest.raises(DescriptorError, match=message):
            compute([good, broken])


@pytest.mark.parametrize("repeat", [(2, 2, 3), (6, 6, 3)])  # small-cell route and vesin's
def test_a_slab_with_a_zero_vector_along_its_open_axis_equals_ase(repeat) -> None:
    """``fcc111(vacuum=None)``: pbc T T F with ``c = 0``. Only the periodic vectors need
    be independent (the reader's rule too): the pairs are ASE's and the same as with any
    ``c``; a structure whose periodic vectors are not independent is still refused."""
    import ase.build

    slab = ase.build.fcc111("Cu", repeat, vacuum=None)
    assert not slab.cell[2].any() and slab.pbc.tolist() == [True, True, False]
    tall = slab.copy()
    tall.cell[2] = [0.3, -0.2, 25.0]
    found = _compare([slab, tall], 5.0)
    assert found.n_pairs > 0
    flat = ase.Atoms("H2", positions=[[0, 0, 0], [1, 0, 0]], cell=[[3, 0, 0], [6, 0, 0], [0, 0, 0]])
    flat.pbc = [True, True, False]
    with pytest.raises(DescriptorError, match=r"structure 0: periodic along \[True, True, False\]"):
        neighbor_list(StructureBatch.from_ase([flat]), 3.0)


def test_a_cell_denser_than_any_material_is_refused_not_listed() -> None:
    """One Cu atom in a 0.05 Å cube (a Lattice in the wrong units): 8,000 atoms/Å³, ~4e6
    images within 5 Å; it ran for minutes or out of memory. Dense real cells pass."""
    import ase.build

    tiny = ase.Atoms("Cu", positions=[[0, 0, 0]], cell=np.eye(3) * 0.05, pbc=True)
    diamond = ase.build.bulk("C", "diamond", a=3.567)  # 0.18 atoms/Å³, the densest solid
    with pytest.raises(DescriptorError, match=r"structure 1: 1 atoms in a periodic cell .* units"):
        neighbor_list(StructureBatch.from_ase([diamond, tiny]), 5.0)
    assert neighbor_list(StructureBatch.from_ase([diamond]), 5.0).n_pairs > 0


def test_a_slab_whose_lattice_is_in_the_wrong_units_is_refused_not_listed() -> None:
    """A slab with a 0.01 Å period in its plane (pbc T T F): the density limit cannot see
    it, and its list would need ~1e6 images per atom within 5 Å; a real slab passes."""
    import ase.build

    tiny = ase.Atoms("Cu", cell=[0.01, 0.01, 20.0], pbc=[True, True, False])
    slab = ase.build.fcc111("Cu", (1, 1, 3), vacuum=None)
    with pytest.raises(DescriptorError, match=r"structure 1: a periodic translation of 0.01"):
        neighbor_list(StructureBatch.from_ase([slab, tiny]), 5.0)
    assert neighbor_list(StructureBatch.from_ase([slab]), 5.0).n_pairs > 0


def test_large_structures_take_vesin_and_stay_in_order_between_small_ones(
    rng: np.random.Generator,
) -> None:
    n = SMALL_CELL_ATOMS + 20
    cluster = ase.Atoms(numbers=rng.choice([1, 6], n), positions=rng.uniform(0, 16, (n, 3)))
    crystal = _random_atoms(rng, n, np.diag([15.0, 14.0, 16.0]), True)
    small = ase.Atoms("CH4", positions=rng.normal(size=(5, 3)))
    _compare([small, cluster, small.copy(), crystal, small.copy()], cutoff=3.5)


def test_atoms_far_outside_skewed_cells_match_ase(rng: np.random.Generator) -> None:
    """Unwrapped positions (several cells away) in strongly sheared cells, all pbc kinds."""
    structures = []
    for pbc in ([True] * 3, [True, True, False], [False, True, True], [True, False, False]):
        cell = np.array([[4.0, 0, 0], [3.1, 3.0, 0], [-2.5, 1.7, 3.5]])
        atoms = _random_atoms(rng, 9, cell, pbc)
        frac = rng.uniform(-3.0, 4.0, (9, 3))
        atoms.set_positions(frac @ cell)
        structures.append(atoms)
    _compare(structures, cutoff=6.3)


def test_small_cell_path_equals_vesin(rng: np.random.Generator, monkeypatch) -> None:
    """The all-pairs path and vesin's cell lists give the same pairs, shifts and vectors."""
    import dparallel.neighbors._vesin as vesin_module

    structures = [
        _random_atoms(rng, int(rng.integers(1, 60)), cell, pbc)
        for cell, pbc in [
            (np.diag([5.0, 6.0, 7.0]) + rng.uniform(-2, 2, (3, 3)) * (1 - np.eye(3)), True),
            (np.diag([2.0, 2.5, 3.0]), True),  # many images of a tiny cell
            (np.diag([12.0, 12.0, 30.0]), [True, True, False]),
            (np.diag([9.0, 9.0, 9.0]), False),
        ]
    ]
    batch = StructureBatch.from_ase(structures)
    ours = neighbor_list(batch, 5.5)
    monkeypatch.setattr(vesin_module, "SMALL_CELL_ATOMS", -1)
    theirs = neighbor_list(batch, 5.5)
    key = lambda nb: np.lexsort((*nb.shifts.T, nb.pair_second, nb.pair_first))  # noqa: E731
    a, b = key(ours), key(theirs)
    np.testing.assert_array_equal(ours.pair_first[a], theirs.pair_first[b])
    np.testing.assert_array_equal(ours.pair_second[a], theirs.pair_second[b])
    np.testing.assert_array_equal(ours.shifts[a], theirs.shifts[b])
    np.testing.assert_allclose(ours.vectors[a], theirs.vectors[b], rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.distances[a], theirs.distances[b], rtol=0, atol=1e-12)


def test_more_pairs_than_the_density_estimate(rng: np.random.Generator) -> None:
    """Atoms packed in one corner of a large cell: the output grows past its first guess."""
    atoms = ase.Atoms(
        numbers=np.full(120, 6), positions=rng.uniform(0, 2.5, (120, 3)),
        cell=np.diag([30.0, 30.0, 30.0]), pbc=True,
    )  # fmt: skip
    nl = _compare([atoms], cutoff=5.0)
    assert nl.n_pairs == 120 * 119


def _rounds_to_the_cutoff(rng: np.random.Generator, cutoff: float) -> np.ndarray:
    """A vector whose squared length is below ``cutoff``² but whose length rounds to it."""
    for _ in range(100_000):
        u = rng.normal(size=3)
        v = cutoff * u / np.linalg.norm(u)
        r2 = float(v @ v)
        if r2 < cutoff * cutoff and np.sqrt(r2) == cutoff:
            return v
    raise AssertionError("no such vector found")


@pytest.mark.parametrize("route", ["small cells", "vesin"])
def test_a_pair_whose_distance_rounds_to_the_cutoff_is_not_listed(
    route: str, rng: np.random.Generator, monkeypatch
) -> None:
    """|r_ij| computed as exactly the cutoff (r² a rounding below rc²) was listed, with
    distance == cutoff: the list promises d < cutoff, and ASE leaves such a pair out."""
    import dparallel.neighbors._vesin as vesin_module

    if route == "vesin":
        monkeypatch.setattr(vesin_module, "SMALL_CELL_ATOMS", -1)
    cutoff = 5.373446977173887
    v = _rounds_to_the_cutoff(rng, cutoff)
    start = np.array([0.1, 0.2, 0.3])
    molecule = ase.Atoms("HO", positions=[start, start + v])
    boxed = ase.Atoms("HO", positions=[start, start + v], cell=np.eye(3) * 20.0, pbc=True)
    for atoms in (molecule, boxed):
        nl = _compare([atoms], cutoff)
        assert nl.n_pairs == 0 and np.all(nl.distances < cutoff)


@pytest.mark.parametrize(("start", "stop"), [(0, 1), (1, 3), (3, 4), (2, 2)])
def test_select_structures_equals_ase_on_those_structures(start: int, stop: int) -> None:
    """The pairs of structures [start, stop) of a batch's list, numbered as in
    ``batch.select(start, stop)``: ASE's list of each of those structures."""
    rng = np.random.default_rng(7)
    atoms_list = [
        _random_atoms(rng, n, np.diag([6.0, 7.0, 8.0]) * (1 + 0.1 * k), True)
        for k, n in enumerate((5, 9, 3, 7))
    ]
    batch = StructureBatch.from_ase(atoms_list)
    sub = select_structures(neighbor_list(batch, 3.5), batch.offsets, start, stop)
    offsets = batch.select(start, stop).offsets
    assert np.all(np.diff(sub.pair_first) >= 0)
    assert sub.n_pairs == sum(len(ase_nl("i", a, 3.5)) for a in atoms_list[start:stop])
    for s, atoms in enumerate(atoms_list[start:stop]):
        a, b = offsets[s], offsets[s + 1]
        m = (sub.pair_first >= a) & (sub.pair_first < b)
        i, j, S, d = ase_nl("ijSd", atoms, 3.5)
        first, second = sub.pair_first[m] - a, sub.pair_second[m] - a
        assert _as_set(first, second, sub.shifts[m], sub.distances[m]) == _as_set(i, j, S, d)
        assert np.allclose(np.linalg.norm(sub.vectors[m], axis=1), sub.distances[m])


def test_a_large_cells_list_takes_little_numpy_memory_beyond_its_own() -> None:
    """vesin's list of a cell above SMALL_CELL_ATOMS beside a small cell's: vesin's i, j
    and S read once into our int64 arrays (copy=False), not copied, converted and offset in
    turn (1.4× the list's own bytes of numpy memory at once, tracemalloc), and the two
    parts joined field by field (twice the list's bytes at once); pairs equal ASE's."""
    import tracemalloc

    from ase.build import bulk

    atoms = bulk("Cu", "fcc", a=3.6, cubic=True) * (8, 8, 8)  # 2,048 atoms
    atoms.rattle(0.05, seed=1)
    first = bulk("Cu", "fcc", a=3.6, cubic=True)  # a small cell before: a nonzero offset
    batch = StructureBatch.from_ase([first, atoms])
    neighbor_list(batch, 5.0)  # imports and compilation outside the measure
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        nl = neighbor_list(batch, 5.0)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    own = sum(a.nbytes for a in nl)
    assert peak < 1.45 * own, peak / own
    _compare([first, atoms], 5.0)
