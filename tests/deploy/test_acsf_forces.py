"""The compiled predict route (numba ACSF + compiled force contraction) against torch.

References: the torch route of the same model (descriptors, ∂G/∂r and forces all in
torch) and autograd through the torch ACSF backend (F = −∂E/∂positions), on a batch
of a small triclinic periodic cell, a molecule and a lone atom together (several
structures and elements in one call).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _deploy_models import hco_acsf, structures, write_model_dir

from dparallel.deploy import load_deployed
from dparallel.train.export import export_model
from dparallel.types import StructureBatch

pytest.importorskip("numba")


@pytest.fixture(scope="module")
def model(tmp_path_factory):  # noqa: ANN001, ANN201
    model_dir = write_model_dir(tmp_path_factory.mktemp("acsf_forces"), hco_acsf())
    export_model(model_dir, artifacts=False)
    return load_deployed(model_dir)


@pytest.mark.parametrize("networks", ["fused", "numpy", "autograd"])
def test_compiled_route_equals_torch_route_and_autograd(model, networks) -> None:  # noqa: ANN001
    batch = StructureBatch.from_ase(list(structures().values()))
    engine = model.engine("numba")
    saved = dict(engine.networks)
    assert all(net is not None for net in saved.values())  # tanh networks: the numpy path
    if networks == "autograd":  # what networks with other activations take
        engine.networks = dict.fromkeys(saved)
    engine.fuse = networks == "fused"  # networks inside the kernel (float64 default)
    try:
        fast = model.predict(batch, stress=True, backend="numba")
    finally:
        engine.networks = saved
        engine.fuse = True
    slow = model.predict(batch, stress=True, backend="torch")
    assert model.engine("numba") is engine and model.engine("torch") is None
    for key in ("energy", "energies", "forces"):
        np.testing.assert_allclose(fast[key], slow[key], rtol=1e-10, atol=1e-10)
    periodic = np.isfinite(slow["stress"])
    assert periodic.any() and not periodic.all()  # the molecule and the lone atom: NaN
    np.testing.assert_array_equal(periodic, np.isfinite(fast["stress"]))
    np.testing.assert_allclose(fast["stress"][periodic], slow["stress"][periodic], rtol=1e-10)
    pos = torch.tensor(batch.positions, requires_grad=True)
    energy = model.energy(batch, pos)
    (grad,) = torch.autograd.grad(energy.sum(), pos)
    np.testing.assert_allclose(fast["energy"], energy.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(fast["forces"], -grad.numpy(), rtol=1e-9, atol=1e-10)


def test_bookkeeping_is_reused_per_neighbour_list_and_redone_for_new_atoms(model) -> None:  # noqa: ANN001
    atoms = structures()["periodic"]
    batch = StructureBatch.from_ase([atoms])
    nb = model.neighbors(batch)
    model.predict(batch, neighbors=nb)
    engine = model.engine("numba")
    layout = engine.layout(batch, nb)
    assert engine.layout(batch, nb) is layout  # same list: reused
    swapped = atoms.copy()
    swapped.set_chemical_symbols(swapped.get_chemical_symbols()[::-1])  # same list, new elements
    other = StructureBatch.from_ase([swapped])
    fast = model.predict(other, neighbors=nb, backend="numba")
    slow = model.predict(other, neighbors=nb, backend="torch")
    assert engine.layout(other, nb) is not layout
    np.testing.assert_allclose(fast["forces"], slow["forces"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(fast["energy"], slow["energy"], rtol=1e-12)


def _dense_cu_model():  # noqa: ANN202
    """A Cu model whose centres have ≥ 24 neighbours (wide functions take the separable
    O(n) route), with rs ≠ 0, both ζ kinds and normalize_nodes (divide layers)."""
    from dparallel.deploy import DeployedModel
    from dparallel.descriptors import ACSF
    from dparallel.train import HDNNP

    acsf = ACSF.uniform(
        ["Cu"], r_cut=4.6, cutoff="cos",
        radial=[(0.01, 0.0), (2.0, 2.6), (2.0, 3.6)],
        narrow=[(0.01, 1.0, -1.0, 0.0), (0.05, 4.0, 1.0, 0.3), (0.02, 2.5, 1.0, 0.0)],
        wide=[(0.02, 1.0, 1.0, 0.0), (0.05, 2.0, -1.0, 0.2)],
    )  # fmt: skip
    n = acsf.n_features("Cu")
    torch.manual_seed(3)
    net = HDNNP(["Cu"], {"Cu": n}, hidden=(10, 7), normalize_nodes=True).double()
    rng = np.random.default_rng(3)
    net.set_scaling("Cu", rng.uniform(0, 1, n), rng.uniform(0.5, 2, n))
    return DeployedModel(acsf, net, torch.float64)


def test_fused_route_on_a_dense_cell_with_a_skin_list_equals_torch_and_finite_differences() -> None:
    from ase.build import bulk

    from dparallel.deploy.verlet import VerletList

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((2, 2, 2))
    atoms.set_cell(atoms.cell.array @ np.array([[1, 0.04, 0], [0, 1, -0.03], [0.02, 0, 1]]),
                   scale_atoms=True)  # fmt: skip
    atoms.rattle(0.05, seed=4)
    model = _dense_cu_model()
    batch = StructureBatch.from_ase([atoms])
    nb = VerletList(model.cutoff, skin=0.5).neighbors(batch)  # pairs beyond the cutoff too
    engine = model.engine("numba")
    assert engine.fuse and engine.networks["Cu"] is not None  # the fused route
    assert engine.layout(batch, nb).whole[0]  # the kernel itself leaves out far pairs
    assert np.bincount(nb.pair_first[nb.distances < model.cutoff]).min() >= 24  # separable
    fast = model.predict(batch, stress=True, neighbors=nb, backend="numba")
    slow = model.predict(batch, stress=True, backend="torch")
    for key in ("energy", "energies", "forces", "stress"):
        np.testing.assert_allclose(fast[key], slow[key], rtol=1e-10, atol=1e-10)
    h = 1e-5  # central differences of the energy, a few coordinates
    for atom, axis in ((0, 0), (7, 1), (19, 2)):
        energies = []
        for sign in (1, -1):
            moved = atoms.copy()
            moved.positions[atom, axis] += sign * h
            energies.append(model.predict(StructureBatch.from_ase([moved]))["energy"][0])
        fd = -(energies[0] - energies[1]) / (2 * h)
        assert abs(fd - fast["forces"][atom, axis]) < 1e-6 * max(1.0, abs(fd))


def test_fused_route_flushing_the_triplet_buffer_mid_centre_equals_torch() -> None:
    """More triplets per centre and element pair than the kernel's buffer holds: the partner
    search stops before the neighbour j that would overflow it, flushes, resumes at j."""
    from ase.build import bulk

    from dparallel.deploy import DeployedModel
    from dparallel.descriptors import ACSF
    from dparallel.kernels import acsf_numba
    from dparallel.train import HDNNP

    acsf = ACSF.uniform(
        ["Cu"], r_cut=6.0, cutoff="cos", radial=[(0.5, 3.0)],
        narrow=[(0.01, 1.0, -1.0, 0.0), (0.05, 4.0, 1.0, 0.5)],
    )  # fmt: skip
    n = acsf.n_features("Cu")
    torch.manual_seed(5)
    net = HDNNP(["Cu"], {"Cu": n}, hidden=(6,)).double()
    model = DeployedModel(acsf, net, torch.float64)
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((2, 2, 2))
    atoms.rattle(0.05, seed=6)
    batch = StructureBatch.from_ase([atoms])
    nb = model.neighbors(batch)
    i, v = nb.pair_first, nb.vectors
    centre = v[i == 0]  # (n, 3) atom 0's neighbours within the cutoff
    d = np.linalg.norm(centre[:, None] - centre[None], axis=-1)
    assert (d[np.triu_indices(len(centre), 1)] < 6.0).sum() > 2 * acsf_numba._CAP
    assert model.engine("numba").fuse
    fast = model.predict(batch, stress=True, neighbors=nb, backend="numba")
    slow = model.predict(batch, stress=True, backend="torch")
    for key in ("energy", "energies", "forces", "stress"):
        np.testing.assert_allclose(fast[key], slow[key], rtol=1e-10, atol=1e-10)


def test_fused_route_sees_in_place_parameter_updates(model) -> None:  # noqa: ANN001
    batch = StructureBatch.from_ase([structures()["periodic"]])
    before = model.predict(batch, backend="numba")  # the network tables are built here
    saved = {k: v.clone() for k, v in model.model.state_dict().items()}
    try:
        with torch.no_grad():
            next(model.model.nets["C"].parameters()).mul_(1.3)  # first layer's weights
            model.model.energy_scale.mul_(0.9)
        after = model.predict(batch, backend="numba")
        slow = model.predict(batch, backend="torch")
    finally:
        model.model.load_state_dict(saved)
    assert np.abs(after["forces"] - before["forces"]).max() > 1e-6
    np.testing.assert_allclose(after["forces"], slow["forces"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(after["energy"], slow["energy"], rtol=1e-12)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_a_neighbor_list_in_any_order_predicts_the_same(model, backend) -> None:  # noqa: ANN001
    """``predict(neighbors=…)`` and ``energy`` with a user's list in another pair order:
    the energies and forces of the list in order (the kernels read one run per centre)."""
    from dparallel.neighbors import Neighbors

    batch = StructureBatch.from_ase(list(structures().values()))
    ordered = model.neighbors(batch)
    order = np.random.default_rng(3).permutation(ordered.n_pairs)
    shuffled = Neighbors(*(field[order] for field in ordered))
    want = model.predict(batch, neighbors=ordered, backend=backend)
    got = model.predict(batch, neighbors=shuffled, backend=backend)
    for key in ("energy", "energies", "forces"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-12, atol=1e-12, err_msg=key)
    pos = torch.tensor(batch.positions)
    np.testing.assert_allclose(
        model.energy(batch, pos, shuffled).detach().numpy(), want["energy"], rtol=1e-12
    )


def test_a_deployed_model_older_than_the_trained_one_is_said(tmp_path, caplog) -> None:  # noqa: ANN001
    """``train --resume`` after an export: deployed.pt is the earlier model; evaluate and
    the Calculator (both load it) say so instead of using it silently. Judged by the
    model.pt it was made from (its digest), not by file times (a copy changes those)."""
    import logging
    import os

    model_dir = write_model_dir(tmp_path, hco_acsf())
    export_model(model_dir, artifacts=False)
    with caplog.at_level(logging.WARNING, logger="dparallel.deploy.deployed"):
        later = (model_dir / "deployed.pt").stat().st_mtime_ns + 10**9
        os.utime(model_dir / "model.pt", ns=(later, later))  # a copy: times, same bytes
        load_deployed(model_dir)
        assert "exported from an earlier" not in caplog.text
        model = torch.load(model_dir / "model.pt", weights_only=False)
        model["spec"] = {**model["spec"], "epochs": 1 + int(model["spec"].get("epochs", 1))}
        torch.save(model, model_dir / "model.pt")  # trained on after the export
        load_deployed(model_dir)
    assert "deployed.pt was exported from an earlier model.pt" in caplog.text
    assert f"dparallel export {model_dir}" in caplog.text


@pytest.mark.parametrize("networks", ["numpy", "autograd"])
def test_unfused_route_in_centre_blocks_equals_torch_and_one_block(networks) -> None:
    """The unfused route (float32, other activations) computes a large cell's centres block
    by block: equal to the torch route and to all centres at once, and ∂G/∂r is never held
    for every pair (tracemalloc's peak, per pair, stays far below all pairs' ∂G/∂r)."""
    import tracemalloc

    from ase.build import bulk

    from dparallel.deploy import acsf_forces

    model = _dense_cu_model()
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((4, 4, 4))  # 256 atoms
    atoms.rattle(0.05, seed=7)
    batch = StructureBatch.from_ase([atoms])
    nb = model.neighbors(batch)
    engine = model.engine("numba")
    engine.fuse = False
    if networks == "autograd":
        engine.networks = dict.fromkeys(engine.networks)
    n_features = model.descriptor.n_features("Cu")
    all_pairs = nb.n_pairs * n_features * 3 * 8  # ∂G/∂r of every pair at once, bytes

    def predict(block_bytes: int) -> tuple[dict, int]:
        engine.block_bytes = block_bytes
        engine._layout = None  # bookkeeping made inside the measured call
        tracemalloc.start()
        try:
            out = model.predict(batch, neighbors=nb, stress=True, backend="numba")
            return out, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    whole, _ = predict(acsf_forces.BLOCK_BYTES)  # one block: the cell is small
    block = all_pairs // 16
    blocked, peak = predict(block)
    segs = engine.layout(batch, nb).segs[0]
    assert len(acsf_forces.centre_blocks(segs, block // (3 * 8 * n_features))) >= 12
    slow = model.predict(batch, neighbors=nb, stress=True, backend="torch")
    for key in ("energy", "energies", "forces", "stress"):
        np.testing.assert_allclose(blocked[key], whole[key], rtol=1e-12, atol=1e-12, err_msg=key)
        np.testing.assert_allclose(blocked[key], slow[key], rtol=1e-10, atol=1e-10, err_msg=key)
    # what stays whole-cell: the layout's int64 index arrays and their temporaries (~5 per
    # pair) and per-atom outputs; a block's ∂G/∂r and its gathers come on top
    assert peak < 48 * nb.n_pairs + 3 * block < all_pairs, (peak, all_pairs)
