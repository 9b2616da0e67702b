import numpy as np
from ase.calculators.emt import EMT

from dparallel.datasets import generate_emt_cu, write_emt_cu


def test_labels_are_emt_and_deterministic(tmp_path):
    structures = generate_emt_cu(8, seed=3)
    assert {a.info["kind"] for a in structures} == {"bulk", "vacancy", "slab"}
    for atoms in structures[:4]:
        reference = atoms.copy()
        reference.calc = EMT()
        np.testing.assert_allclose(atoms.get_potential_energy(), reference.get_potential_energy())
        np.testing.assert_allclose(atoms.get_forces(), reference.get_forces())
    again = generate_emt_cu(8, seed=3)
    assert all(
        np.array_equal(a.positions, b.positions) for a, b in zip(structures, again, strict=True)
    )
    path = write_emt_cu(tmp_path / "cu.extxyz", n_structures=8, seed=3)
    import ase.io

    back = ase.io.read(path, ":")
    assert len(back) == 8
    np.testing.assert_allclose(back[5].get_forces(), structures[5].get_forces(), atol=1e-6)
