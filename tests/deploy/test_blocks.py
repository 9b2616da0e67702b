"""Centre blocks and the torch route of ``DeployedModel.predict`` computed block by block.

References: the same model's compiled route (numba ACSF with the networks fused in),
autograd through the descriptor's torch graph form (F = −∂E/∂positions, ``model.energy``),
and central finite differences of the energy in positions and in a homogeneous strain;
memory: a fresh process's peak RSS (VmHWM) against all pairs' ∂G/∂r.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from _deploy_models import hco_acsf, hco_neighbor_sum, structures, write_model_dir

from dparallel.deploy import load_deployed
from dparallel.deploy.blocks import BLOCK_BYTES, centre_batches, centre_blocks
from dparallel.train.export import export_model
from dparallel.types import StructureBatch

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["acsf", "neighbor_sum"])
def model(request, tmp_path_factory):  # noqa: ANN001, ANN201
    descriptor = hco_acsf() if request.param == "acsf" else hco_neighbor_sum()
    model_dir = write_model_dir(tmp_path_factory.mktemp(request.param), descriptor)
    export_model(model_dir, artifacts=False)
    return load_deployed(model_dir)


def _batch() -> StructureBatch:
    """A 32-atom H/C/O fcc cell (rattled, random elements), then a small triclinic cell, a
    molecule and a lone atom: blocks that end inside a structure and span two of them."""
    from ase.build import bulk

    cell = bulk("Cu", "fcc", a=3.3, cubic=True).repeat((2, 2, 2))
    rng = np.random.default_rng(11)
    cell.set_chemical_symbols(rng.choice(["H", "C", "O"], len(cell)).tolist())
    cell.rattle(0.1, seed=4)
    return StructureBatch.from_ase([cell, *structures().values()])


def _predict(model, batch: StructureBatch, block_bytes: int, **kw) -> dict:  # noqa: ANN001
    model.block_bytes = block_bytes
    backend = "torch" if "torch" in model.kind.backends else "auto"  # neighbour sums: torch
    try:
        return model.predict(batch, stress=True, backend=backend, **kw)
    finally:
        model.block_bytes = BLOCK_BYTES


def test_torch_route_in_blocks_equals_one_block_compiled_route_and_autograd(
    model,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
) -> None:
    batch = _batch()
    nb = model.neighbors(batch)
    per_pair = 3 * 8 * max(model.model.n_features.values())
    seg = np.searchsorted(nb.pair_first, np.arange(batch.n_atoms + 1))
    n_blocks = len(centre_blocks(seg, 40))
    assert n_blocks >= 20  # blocks of ~40 pairs: a few centres each
    calls, compute = [], model._compute
    monkeypatch.setattr(model, "_compute", lambda *a: calls.append(a[0]) or compute(*a))
    blocked = _predict(model, batch, 40 * per_pair, neighbors=nb)
    assert len(calls) == n_blocks and max(c.n_atoms for c in calls) < batch.n_atoms
    monkeypatch.undo()
    whole = _predict(model, batch, 10**12, neighbors=nb)
    for key in ("energy", "energies", "forces", "stress"):
        np.testing.assert_allclose(blocked[key], whole[key], rtol=1e-12, atol=1e-13, err_msg=key)
    pos = torch.tensor(batch.positions, requires_grad=True)
    energy = model.energy(batch, pos)
    (grad,) = torch.autograd.grad(energy.sum(), pos)
    np.testing.assert_allclose(blocked["energy"], energy.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(blocked["forces"], -grad.numpy(), rtol=1e-10, atol=1e-11)
    if model.kind.name == "acsf":
        fused = model.predict(batch, neighbors=nb, stress=True, backend="numba")
        for key in ("energy", "energies", "forces", "stress"):
            np.testing.assert_allclose(blocked[key], fused[key], rtol=1e-12, atol=1e-12)


def test_torch_route_in_blocks_equals_finite_differences(model) -> None:  # noqa: ANN001
    batch = _batch().select(0, 1)  # the 32-atom cell, periodic
    block = 40 * 3 * 8 * max(model.model.n_features.values())
    ref = model.model.ref_energy.clone()
    model.model.ref_energy.zero_()  # energies of ~10 eV, not ~10⁴: differences to ~1e-10
    try:
        _compare_with_finite_differences(model, batch, block)
    finally:
        model.model.ref_energy.copy_(ref)


def _compare_with_finite_differences(model, batch: StructureBatch, block: int) -> None:  # noqa: ANN001
    out = _predict(model, batch, block)
    h = 1e-5

    def energy(positions: np.ndarray, cell: np.ndarray) -> float:
        moved = batch.with_positions(positions)
        object.__setattr__(moved, "cells", cell[None])
        return float(_predict(model, moved, block)["energy"][0])

    for atom, axis in ((0, 0), (9, 1), (30, 2)):
        plus, minus = batch.positions.copy(), batch.positions.copy()
        plus[atom, axis] += h
        minus[atom, axis] -= h
        fd = -(energy(plus, batch.cells[0]) - energy(minus, batch.cells[0])) / (2 * h)
        np.testing.assert_allclose(out["forces"][atom, axis], fd, rtol=1e-7, atol=1e-9)
    volume = abs(np.linalg.det(batch.cells[0]))
    for a, b in ((0, 0), (0, 1), (2, 1)):  # σ_ab = (1/V) ∂E/∂ε_ab, r → r (1 + ε)
        deform = np.zeros((3, 3))
        deform[a, b] = h
        plus, minus = np.eye(3) + deform, np.eye(3) - deform
        e_plus = energy(batch.positions @ plus, batch.cells[0] @ plus)
        e_minus = energy(batch.positions @ minus, batch.cells[0] @ minus)
        fd = (e_plus - e_minus) / (2 * h * volume)
        np.testing.assert_allclose(out["stress"][0, a, b], fd, rtol=1e-7, atol=1e-9)


def test_centre_batches_hold_each_centre_once_with_its_pairs() -> None:
    batch = _batch()
    from dparallel.neighbors import neighbor_list

    nb = neighbor_list(batch, 3.5)
    parts = list(centre_batches(batch, nb, 25))
    assert len(parts) > 10
    centres = np.concatenate([p.atoms[p.centre] for p in parts])
    np.testing.assert_array_equal(centres, np.arange(batch.n_atoms))
    pairs = np.concatenate(
        [np.stack([p.atoms[p.neighbors.pair_first], p.atoms[p.neighbors.pair_second]], 1)
         for p in parts]
    )  # fmt: skip
    np.testing.assert_array_equal(pairs, np.stack([nb.pair_first, nb.pair_second], 1))
    for p in parts:
        np.testing.assert_array_equal(p.batch.numbers, batch.numbers[p.atoms])
        np.testing.assert_array_equal(p.batch.structure_index, batch.structure_index[p.atoms])
    whole = list(centre_batches(batch, nb, nb.n_pairs))
    assert len(whole) == 1 and whole[0].batch is batch and whole[0].neighbors is nb


def test_centre_blocks_cover_every_centre_once() -> None:
    counts = np.array([3, 0, 7, 2, 2, 9, 1, 0, 4])
    seg = np.concatenate([[0], np.cumsum(counts)])
    for limit in (1, 4, 5, 10, 28, 29, 100):
        blocks = centre_blocks(seg, limit)
        assert [a for a, _ in blocks] == [0] + [b for _, b in blocks[:-1]]
        assert blocks[-1][1] == len(counts) and all(a < b for a, b in blocks)
        for a, b in blocks:
            assert seg[b] - seg[a] <= limit + counts[a:b].max()  # one centre may overrun
    assert centre_blocks(seg, 28) == [(0, 9)]


_PEAK = """
import json, sys
import torch
from ase.build import bulk
from dparallel.deploy import DeployedModel
from dparallel.train import HDNNP
from dparallel.types import StructureBatch
from dparallel.workflow.spec import load_quickstart

torch.set_num_threads(1)
acsf = load_quickstart().descriptors.build().acsf  # 12 functions, rc 5 Å
torch.manual_seed(0)
model = DeployedModel(acsf, HDNNP(["Cu"], {"Cu": acsf.n_features("Cu")}, hidden=(48, 48)).double())
model.block_bytes = int(sys.argv[1])
small = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((2, 2, 2))
model.predict(small, stress=True, backend="torch")  # imports and first calls
atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((10, 10, 10))  # 4,000 atoms
atoms.rattle(0.02, seed=1)
batch = StructureBatch.from_ase([atoms])
nb = model.neighbors(batch)


def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))


with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from the RSS of now: not an earlier one's
start = status("VmRSS")
model.predict(batch, neighbors=nb, stress=True, backend="torch")
peak = status("VmHWM")
pairs = int((nb.distances < model.cutoff).sum())
print(json.dumps({"peak": peak - start, "atoms": len(atoms), "dG_dr": pairs * 12 * 3 * 8}))
"""


@pytest.mark.slow
@pytest.mark.skipif(
    not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux's /proc/self/clear_refs"
)
def test_torch_route_peak_memory_is_bounded_per_atom_not_by_all_pairs() -> None:
    """4,000 atoms of fcc Cu, 12 functions, ∂G/∂r in blocks of 256 KiB: the peak RSS
    (VmHWM, reset just before the call) above the RSS before it stays below all pairs'
    ∂G/∂r (48 MB; the unblocked route held them with ~4× as much of intermediates: its
    peak was 250–300 MB) and so below 12 kB/atom."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PEAK), str(2**18)],
        env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["peak"] < got["dG_dr"], got
    assert got["peak"] / got["atoms"] < 12e3, got
