"""Kalman filter optimizer: exact on linear least squares, lowers an HDNNP's loss, resumes."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from _callbacks import stop_after
from _store_fixture import small_store

from dparallel.train import TrainingSpec, kalman
from dparallel.train import train as train_model
from dparallel.train.kalman import KalmanFilter


def _linear_problem(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(60, 7))
    y = x @ rng.normal(size=7) + 0.1 * rng.normal(size=60)
    return x, y


@pytest.mark.parametrize("rows_per_update", [1, 4, 60])
def test_linear_least_squares_reaches_the_exact_solution(rows_per_update: int) -> None:
    """Without process noise the filter is recursive least squares: after all rows, w is
    the ridge solution (η XᵀX + ε I)⁻¹ η Xᵀy exactly, whatever the grouping of rows."""
    x, y = _linear_problem()
    eps, eta = 1e-3, 2.0
    w = torch.zeros(7, dtype=torch.float64, requires_grad=True)
    kf = KalmanFilter([w], epsilon=eps, q0=0.0, eta0=eta, eta_max=eta)
    for start in range(0, len(y), rows_per_update):
        xb = torch.from_numpy(x[start : start + rows_per_update])
        yb = torch.from_numpy(y[start : start + rows_per_update])
        kf.update(xb.T.clone(), yb - xb @ w.detach())  # H (n, m) = ∂(Xw)/∂w
    exact = np.linalg.solve(eta * x.T @ x + eps * np.eye(7), eta * x.T @ y)
    np.testing.assert_allclose(w.detach().numpy(), exact, rtol=1e-10, atol=1e-12)
    # a vague prior gives the ordinary least-squares solution
    np.testing.assert_allclose(exact, np.linalg.lstsq(x, y, rcond=None)[0], rtol=1e-4)
    p = kf.filter_state["P"].numpy()
    np.testing.assert_allclose(p, np.linalg.inv(eta * x.T @ x + eps * np.eye(7)), rtol=1e-8)


def _filter_on(x: np.ndarray, y: np.ndarray, rows_per_update: int) -> KalmanFilter:
    """A noise-free filter (ε 1e-3, η 2) fed ``x``'s rows, ``rows_per_update`` at a time."""
    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    kf = KalmanFilter([w], epsilon=1e-3, q0=0.0, eta0=2.0, eta_max=2.0)
    for start in range(0, len(y), rows_per_update):
        xb = torch.from_numpy(x[start : start + rows_per_update])
        yb = torch.from_numpy(y[start : start + rows_per_update])
        kf.update(xb.T.clone(), yb - xb @ w.detach())
    return kf


def test_a_filter_of_more_weights_than_a_block_of_rows(monkeypatch) -> None:  # noqa: ANN001
    """On the CPU with one thread P·H runs by blocks of rows of P
    (:data:`kalman.CPU_ROW_BLOCK`; the last one partial): the filter still ends at the ridge
    solution (numpy's), and equals the filter that multiplies P whole to rounding (MKL may
    round a block's row otherwise)."""
    n = 2 * kalman.CPU_ROW_BLOCK + 37
    rng = np.random.default_rng(1)
    x = rng.normal(size=(84, n))
    y = x @ rng.normal(size=n) + 0.1 * rng.normal(size=84)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (with more, the whole product: it is cheaper there)
    try:
        blocked = _filter_on(x, y, 28)
    finally:
        torch.set_num_threads(threads)
    w = blocked.params[0].detach().numpy()
    exact = np.linalg.solve(2.0 * x.T @ x + 1e-3 * np.eye(n), 2.0 * x.T @ y)
    np.testing.assert_allclose(w, exact, rtol=1e-7, atol=1e-9)
    monkeypatch.setattr(kalman, "CPU_ROW_BLOCK", n)  # one block: the whole product
    whole = _filter_on(x, y, 28)
    np.testing.assert_allclose(w, whole.params[0].detach().numpy(), rtol=1e-12, atol=1e-14)
    p_blocked, p_whole = blocked.filter_state["P"].numpy(), whole.filter_state["P"].numpy()
    np.testing.assert_allclose(p_blocked, p_whole, rtol=1e-12, atol=1e-14 * abs(p_whole).max())


def test_noise_schedules_follow_n2p2() -> None:
    """η grows by exp(η_τ) before each update while below η_max, q shrinks by exp(−q_τ)
    after each update while above q_min (n2p2's KalmanFilter::update: both may pass their
    bound once)."""
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    kf = KalmanFilter([w], q0=0.01, q_tau=1.0, q_min=1e-3, eta0=0.1, eta_tau=1.0, eta_max=1.0)
    h, xi = torch.ones(2, 1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    etas, qs = [], []
    for _ in range(4):
        kf.update(h, xi)
        etas.append(kf.filter_state["eta"])
        qs.append(kf.filter_state["q"])
    np.testing.assert_allclose(etas, [0.1 * np.e, 0.1 * np.e**2, 0.1 * np.e**3, 0.1 * np.e**3])
    np.testing.assert_allclose(qs, [0.01 / np.e, 0.01 / np.e**2, 0.01 / np.e**3, 0.01 / np.e**3])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return small_store(tmp_path_factory.mktemp("kalman"), n=24)


SPEC = TrainingSpec(
    optimizer="kalman", epochs=3, hidden=(6,), batch_size=4, seed=3, shuffle_buffer=6,
    activation="tanh", kalman_force_components=2,
)  # fmt: skip


def test_kalman_lowers_the_loss_of_an_hdnnp(store, tmp_path) -> None:  # noqa: ANN001
    res = train_model(store, tmp_path / "m", SPEC)
    losses = [r["train_loss"] for r in res.history]
    val = [r["validation_loss"] for r in res.history]
    assert losses[-1] < 0.5 * losses[0], losses
    assert val[-1] < val[0], val


def test_kalman_state_resumes_from_the_checkpoint(store, tmp_path) -> None:  # noqa: ANN001
    straight = train_model(store, tmp_path / "a", SPEC)
    train_model(store, tmp_path / "b", SPEC, callback=stop_after(1))
    resumed = train_model(store, tmp_path / "b", SPEC, resume=True)
    for ra, rb in zip(straight.history, resumed.history, strict=True):
        assert ra["train_loss"] == rb["train_loss"]  # bitwise
    ca = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)
    cb = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)
    sa, sb = ca["optimizer"]["state"][0], cb["optimizer"]["state"][0]
    assert torch.equal(sa["P"], sb["P"]) and sa["updates"] == sb["updates"] > 0
    for k, v in ca["model"].items():
        assert torch.equal(v, cb["model"][k]), k


def test_observation_rows_are_the_gradients_of_energies_and_forces(store) -> None:  # noqa: ANN001
    """Jacobian rows against autograd through the training forces (double backward)."""
    from dparallel.train.data import BatchPlan, PartitionReader, iterate_batches
    from dparallel.train.device import Target
    from dparallel.train.kalman import observations
    from dparallel.train.objective import predict_batch
    from dparallel.train.preparation import build_model, prepare

    spec = SPEC.model_copy(update={"force_weight": 0.5})
    prep = prepare(store, spec)
    model = build_model(prep, spec, Target.of(spec))
    reader = PartitionReader(store, "acsf", prep.elements, prep.index, True, 2**26)
    batch = next(
        iter(
            iterate_batches(reader, BatchPlan(reader.index, "train", 4, shuffle=False), prefetch=0)
        )
    )
    params = [p for p in model.parameters() if p.requires_grad]
    pick = torch.tensor([0, 4, 3 * batch.n_atoms - 1, 7])  # includes atom 0 twice
    obs = observations(model, params, batch, spec, True, pick=pick)
    e, f = predict_batch(model, batch, True, create_graph=True)
    s = float(model.energy_scale)
    rows = [e[i] / batch.atom_counts[i] / s for i in range(batch.n_structures)]
    rows += [f.reshape(-1)[c] * 0.5**0.5 / s for c in pick]

    def flat_grad(r: torch.Tensor) -> torch.Tensor:
        gs = torch.autograd.grad(r, params, retain_graph=True, allow_unused=True)
        return torch.cat([
            (g if g is not None else torch.zeros_like(p)).reshape(-1)
            for g, p in zip(gs, params, strict=True)
        ])  # fmt: skip

    want = torch.stack([flat_grad(r) for r in rows], dim=1)  # (n, m)
    assert obs.H.shape == want.shape
    torch.testing.assert_close(obs.H, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(obs.forces, f.detach(), rtol=1e-12, atol=1e-12)
    de = (batch.energy - e.detach()) / batch.atom_counts / s
    df = (batch.forces.reshape(-1)[pick] - f.detach().reshape(-1)[pick]) * 0.5**0.5 / s
    ref = torch.cat([de, df])
    torch.testing.assert_close(obs.xi, ref, rtol=1e-12, atol=1e-12)


def test_an_updates_operations_do_not_grow_with_its_rows(store) -> None:  # noqa: ANN001
    """The Jacobian rows come from one vmapped backward pass: a batch of 4 structures (4
    energy and 8 force rows) runs as many torch operations as one of 2 (autograd's
    legacy ``is_grads_batched`` looped over the rows at tanh_backward, index_select and
    index_put: a kernel launch each on a GPU)."""
    from collections import Counter

    from dparallel.train.data import BatchPlan, PartitionReader, iterate_batches
    from dparallel.train.device import Target
    from dparallel.train.kalman import observations
    from dparallel.train.preparation import build_model, prepare

    spec = SPEC.model_copy(update={"force_weight": 0.5})
    prep = prepare(store, spec)
    model = build_model(prep, spec, Target.of(spec))
    reader = PartitionReader(store, "acsf", prep.elements, prep.index, True, 2**26)
    params = [p for p in model.parameters() if p.requires_grad]
    counts = {}
    for size in (2, 4):
        plan = BatchPlan(reader.index, "train", size, shuffle=False)
        batch = next(iter(iterate_batches(reader, plan, prefetch=0)))
        assert batch.n_structures == size
        observations(model, params, batch, spec, True)  # warm
        with torch.profiler.profile() as prof:
            obs = observations(model, params, batch, spec, True)
        assert obs.H.shape[1] == 3 * size  # an energy and 2 force components per structure
        ops = Counter(e.name for e in prof.events() if e.name.startswith("aten::"))
        counts[size] = sum(ops.values())
    assert counts[4] == counts[2], counts


class _TorchKalman(torch.optim.Optimizer):
    """The filter's state as a ``torch.optim.Optimizer`` holds it (what KalmanFilter was
    before it stopped subclassing it): checkpoints of either layout must load in the other."""

    def __init__(self, params, **hyper) -> None:  # noqa: ANN001
        super().__init__(params, {"lr": 1.0, **hyper})
        p0 = self.param_groups[0]["params"][0]
        n = sum(p.numel() for p in self.param_groups[0]["params"])
        self.state[p0] = {"P": torch.eye(n, dtype=p0.dtype) * 3.0, "q": 0.5, "eta": 0.25,
                          "updates": 7}  # fmt: skip


def test_filter_state_dicts_have_torch_optimizers_layout() -> None:
    hyper = dict(epsilon=0.1, q0=0.02, q_tau=0.5, q_min=1e-5, eta0=0.03, eta_tau=0.1, eta_max=2.0)
    params = [torch.zeros(3, 2, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)]
    reference = _TorchKalman(params, **hyper)
    kf = KalmanFilter([torch.zeros(3, 2), torch.zeros(4)])  # float32: P is cast on load
    kf.load_state_dict(reference.state_dict())
    st = kf.filter_state
    assert st["P"].dtype == torch.float32 and torch.equal(st["P"], torch.eye(10) * 3.0)
    assert (st["q"], st["eta"], st["updates"]) == (0.5, 0.25, 7)
    assert {k: kf.param_groups[0][k] for k in hyper} == hyper  # restored, as torch does
    back = _TorchKalman([torch.zeros(3, 2), torch.zeros(4)], **hyper)
    back.load_state_dict(kf.state_dict())
    mine, theirs = kf.state_dict(), reference.state_dict()
    assert mine["param_groups"] == theirs["param_groups"]
    assert mine["state"].keys() == theirs["state"].keys() == {0}
    assert torch.equal(next(iter(back.state.values()))["P"], torch.eye(10) * 3.0)
    with pytest.raises(ValueError, match="another number of parameters"):
        KalmanFilter([torch.zeros(3, 2)]).load_state_dict(reference.state_dict())


def test_a_kalman_train_command_imports_neither_dynamo_nor_distributed(store, tmp_path) -> None:  # noqa: ANN001
    """``dparallel train`` with the Kalman filter and no cluster: a ``torch.optim.Optimizer``
    imports ``torch._dynamo`` when made (~2 s) and looking for a cluster to publish the
    epoch's metrics to imported ``distributed`` (~1 s); it needs neither."""
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys\n"
        "from dparallel.cli.main import main\n"
        "rc = main(sys.argv[1:])\n"
        "print(rc, 'torch._dynamo' in sys.modules, 'distributed' in sys.modules)\n"
    )
    sets = {k: v for k, v in SPEC.model_dump().items() if k in SPEC.model_fields_set}
    argv = [str(store.path), "-o", str(tmp_path / "m"), "-q", "--set", "epochs=1"]
    for key, value in sets.items():
        if key != "epochs":
            argv += ["--set", f"{key}={list(value) if isinstance(value, tuple) else value}"]
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", script, "train", *argv],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": root},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-3:] == ["0", "False", "False"], out.stdout[-2000:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batched_grad_rows_equal_row_by_row_autograd(dtype) -> None:
    """batched_grad (one backward pass under torch.func.vmap) against one
    torch.autograd.grad per cotangent row: two outputs, one with no rows (an element with
    no atoms in the batch), a parameter no output uses (zeros), index_select and
    index_put on the way (the ops the legacy vmap looped over)."""
    from dparallel.train.kalman import batched_grad

    gen = torch.Generator().manual_seed(3)
    w = torch.randn(3, 4, generator=gen, dtype=dtype, requires_grad=True)
    b = torch.randn(4, generator=gen, dtype=dtype, requires_grad=True)
    unused = torch.randn(2, 2, generator=gen, dtype=dtype, requires_grad=True)
    x = torch.randn(6, 3, generator=gen, dtype=dtype)
    pick = torch.tensor([0, 2, 2, 5])
    h = torch.tanh(x @ w + b)  # (6, 4)
    y = torch.zeros(3, dtype=dtype).index_put((torch.tensor([0, 1, 1, 2]),), h[pick, 0],
                                              accumulate=True)  # fmt: skip
    y = torch.cat([y, h.index_select(0, pick).sum(1)])  # (7,)
    empty = torch.tanh(x[:0] @ w).sum(1)  # (0,)
    m = 5
    cot = [torch.randn(m, 7, generator=gen, dtype=dtype), torch.zeros(m, 0, dtype=dtype)]
    got = batched_grad([y, empty], [w, b, unused], cot)
    assert [tuple(g.shape) for g in got] == [(m, 3, 4), (m, 4), (m, 2, 2)]
    for i in range(m):
        want = torch.autograd.grad([y, empty], [w, b, unused], [cot[0][i], cot[1][i]],
                                   retain_graph=True, materialize_grads=True)  # fmt: skip
        for g, r in zip(got, want, strict=True):
            assert g.dtype == dtype
            torch.testing.assert_close(
                g[i], r, rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-14
            )
    assert not got[2].any()


def _store_dropping_energies(root, every: int):  # noqa: ANN001, ANN202
    """EMT Cu structures, every ``every``-th without its energy (1: none has one)."""
    import ase.io
    from _store_fixture import build_store, small_acsf
    from ase.calculators.singlepoint import SinglePointCalculator

    from dparallel.datasets import write_emt_cu

    frames = ase.io.read(write_emt_cu(root / "cu.xyz", 8, seed=3), ":")
    for k, atoms in enumerate(frames):
        energy = None if k % every == 0 else atoms.get_potential_energy()
        atoms.calc = SinglePointCalculator(atoms, energy=energy, forces=atoms.get_forces())
    ase.io.write(root / "some.xyz", frames, format="extxyz")
    return build_store(root / "some.xyz", root / "some.zarr", small_acsf())


def test_a_batch_without_energies_updates_from_its_forces(tmp_path) -> None:  # noqa: ANN001
    """A batch of structures without energies stopped the run (an empty energy Jacobian);
    its update now takes its force rows: one update per batch, every batch has forces."""
    store = _store_dropping_energies(tmp_path, every=2)
    spec = SPEC.model_copy(update={"epochs": 1, "batch_size": 1, "validation_fraction": 0,
                                   "test_fraction": 0})  # fmt: skip
    res = train_model(store, tmp_path / "m", spec)
    assert np.isfinite(res.history[0]["train_loss"])
    state = torch.load(tmp_path / "m" / "checkpoint.pt", weights_only=True)["optimizer"]
    assert state["state"][0]["updates"] == store.n_structures == 8
