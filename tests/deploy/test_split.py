"""``DeployedModel.predict(threads=N)``: the structures of a batch shared among threads
(dparallel/deploy/split.py). Reference: n2p2's ``nnp-dataset`` on the same potential and
structures; the threads' outputs also equal one thread's to rounding (as another batch
size does: a structure's last bits may depend on what else is in its call)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "n2p2"))
from n2p2_helpers import alloy_structures, assert_same, n2p2_potential, nnp_dataset

from dparallel.deploy import DeployedModel
from dparallel.deploy.split import split_points
from dparallel.io import open_source
from dparallel.n2p2 import load_potential, write_input_data
from dparallel.n2p2.binaries import find_bin_dir

pytest.importorskip("numba")


def test_two_threads_equal_n2p2_and_one_thread(tmp_path: Path) -> None:
    if find_bin_dir() is None:
        pytest.skip("n2p2 is not built: run ../shared/n2p2/build.sh (or set N2P2_BIN)")
    pot = n2p2_potential(tmp_path)
    write_input_data(tmp_path / "input.data", alloy_structures(6))
    ref_e, ref_f = nnp_dataset(tmp_path)  # file units: read as Å/eV on both sides
    batch = open_source(tmp_path / "input.data", "n2p2").read(0, None)
    model = DeployedModel(*load_potential(pot, units="ase"))
    engine = model.engine()
    assert engine is not None  # the compiled route
    seen: set[int] = set()

    def recording(*args):  # noqa: ANN002, ANN202
        seen.add(threading.get_ident())
        return engine(*args)

    model._engines["auto"] = recording
    two = model.predict(batch, stress=True, threads=2)
    assert len(seen) == 2 and threading.get_ident() not in seen
    assert_same(two["energy"], two["forces"], ref_e, ref_f, rtol=1e-10)
    seen.clear()
    one = model.predict(batch, stress=True, threads=1)
    assert seen == {threading.get_ident()}
    for key in ("energy", "energies", "forces", "stress"):
        scale = np.nanmax(np.abs(one[key]))
        assert np.allclose(two[key], one[key], rtol=0, atol=1e-13 * scale, equal_nan=True), key


def test_split_points_cut_whole_structures_of_about_equal_work(tmp_path: Path) -> None:
    from dparallel.types import StructureBatch

    structures = alloy_structures(6)  # six 32-atom cells and an 8-atom cluster
    batch = StructureBatch.from_ase(structures)
    nb = DeployedModel(*load_potential(n2p2_potential(tmp_path), units="ase")).neighbors(batch)
    assert split_points(batch, nb, 1) == [0, 7]
    assert split_points(batch, nb, 2) == [0, 3, 7]  # three cells | three and the cluster
    assert split_points(batch, nb, 50) == list(range(8))  # one structure each at most


def test_an_unknown_element_is_named_by_its_structure_in_the_batch_not_in_its_part(
    tmp_path: Path,
) -> None:
    from dparallel.errors import UnknownElementError
    from dparallel.types import StructureBatch

    structures = alloy_structures(6)
    structures[5][2].symbol = "Pt"  # the potential knows Cu, Ag, Au
    batch = StructureBatch.from_ase(structures)
    model = DeployedModel(*load_potential(n2p2_potential(tmp_path), units="ase"))
    for threads in (1, 3):
        with pytest.raises(UnknownElementError, match=r"^structure 5, atom 2: atomic number 78"):
            model.predict(batch, threads=threads)
