"""n2p2's global extended Kalman filter (``optimizer: kalman``).

The filter (n2p2 ``KalmanFilter.cpp``, standard type) keeps the covariance P (n, n) of all
n weights. One update with m observations ξ (m,) and their Jacobian H (n, m) = ∂y/∂w:

    X = P·H,  A = HᵀX + I/η,  K = X·A⁻¹,  P ← P − K·Xᵀ + q·I,  w ← w + K·ξ

with η (the inverse measurement noise) raised by exp(η_τ) per update while below η_max and the
process noise q lowered by exp(−q_τ) per update while above q_min; P starts as I/ε.
:func:`kalman_step` makes one multi-stream update per mini-batch: every structure's energy
per atom and ``kalman_force_components`` force components per structure, all as rows of
one H, so a single update sees energies and forces (n2p2 alternates energy and force
updates; here they are one combined update, with the same error weights as the loss).
Memory is O(n²): 8 n² bytes for P in float64.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from dparallel.train.objective import loss

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from dparallel.nn import HDNNP
    from dparallel.train.batch import Batch
    from dparallel.train.spec import TrainingSpec


class KalmanFilter:
    """Global extended Kalman filter over all parameters (n2p2's standard Kalman filter).

    ``params`` are flattened in order into one state vector of length n; ``epsilon``, the
    process noise ``q0``, ``q_tau``, ``q_min`` and the inverse measurement noise ``eta0``,
    ``eta_tau``, ``eta_max`` are those of the module docstring (the spec's ``kalman_*``,
    τ's per update). The filter state (P, q, η, number of updates) is in
    :meth:`state_dict`, so checkpoints resume it.

    Not a ``torch.optim.Optimizer``, whose constructor imports ``torch._dynamo`` (~2 s, once
    per process), which nothing else in a Kalman run needs; it keeps that class's
    ``param_groups``, ``state`` and state-dict layout, so checkpoints of either load.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        epsilon: float = 0.01,
        q0: float = 0.01,
        q_tau: float = 0.0,
        q_min: float = 1e-6,
        eta0: float = 0.01,
        eta_tau: float = 0.0,
        eta_max: float = 1.0,
    ) -> None:
        tensors = list(params)
        if not tensors or not all(isinstance(p, torch.Tensor) for p in tensors):
            raise ValueError("KalmanFilter takes a non-empty list of tensors (one group)")
        self.param_groups: list[dict[str, Any]] = [
            dict(
                params=tensors, lr=1.0, epsilon=epsilon, q0=q0, q_tau=q_tau, q_min=q_min,
                eta0=eta0, eta_tau=eta_tau, eta_max=eta_max,
            )
        ]  # fmt: skip
        p0 = tensors[0]
        n = sum(p.numel() for p in tensors)
        self.state: dict[torch.Tensor, dict[str, Any]] = {
            p0: {
                "P": torch.eye(n, dtype=p0.dtype, device=p0.device) / epsilon,  # (n, n), w's device
                "q": q0,
                "eta": eta0,
                "updates": 0,
            }
        }

    @property
    def params(self) -> list[torch.Tensor]:
        """The parameters, in state-vector order."""
        return list(self.param_groups[0]["params"])

    @property
    def filter_state(self) -> dict[str, Any]:
        """P (n, n), q, eta and the number of updates."""
        return self.state[self.params[0]]

    @torch.no_grad()
    def update(self, H: torch.Tensor, xi: torch.Tensor) -> None:
        """One Kalman update from Jacobian ``H`` (n, m) and errors ``xi`` (m,) = y_ref − y."""
        g = self.param_groups[0]
        st = self.filter_state
        P = st["P"]
        if st["eta"] < g["eta_max"]:
            st["eta"] *= math.exp(g["eta_tau"])  # as n2p2: may overshoot eta_max once
        X = _times(P, H)  # (n, m)
        A = H.T @ X  # (m, m)
        A.diagonal().add_(1.0 / st["eta"])
        K = torch.linalg.solve(A, X.T).T  # (n, m) = X A⁻¹ (A symmetric)
        P.addmm_(K, X.T, alpha=-1.0)  # in place: no (n, n) temporary
        P.diagonal().add_(st["q"])
        dw = K @ xi  # (n,)
        for p, d in zip(self.params, dw.split([p.numel() for p in self.params]), strict=True):
            p.add_(d.view_as(p))
        if st["q"] > g["q_min"]:
            st["q"] *= math.exp(-g["q_tau"])
        st["updates"] += 1

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {0: filter state}, "param_groups": [hyperparameters, params as
        numbers]}``: the layout of ``torch.optim.Optimizer.state_dict``."""
        group = self.param_groups[0]
        numbered = {**group, "params": list(range(len(group["params"])))}
        return {"state": {0: dict(self.filter_state)}, "param_groups": [numbered]}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (hyperparameters included, as torch's optimizers do),
        P on the parameters' device and dtype (a checkpoint of another device resumes)."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError(
                "loaded state dict has another number of parameters than the filter's "
                f"({sum(len(g['params']) for g in groups)} against {len(self.params)})"
            )
        saved = dict(state_dict["state"][groups[0]["params"][0]])
        p0 = self.params[0]
        n = sum(p.numel() for p in self.params)
        if tuple(saved["P"].shape) != (n, n):
            raise ValueError(f"loaded P is {tuple(saved['P'].shape)}, the filter's ({n}, {n})")
        saved["P"] = saved["P"].to(device=p0.device, dtype=p0.dtype)
        self.param_groups[0].update({k: v for k, v in groups[0].items() if k != "params"})
        self.state = {p0: saved}


#: Rows of P per product of :func:`_times` on the CPU.
CPU_ROW_BLOCK = 256


def _times(P: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    """P·H (n, m); on the CPU with one torch thread by blocks of :data:`CPU_ROW_BLOCK`
    rows of P.

    Each row of P·H is the same sum either way, to rounding (MKL may round a row of a
    block otherwise: the weights of water ×5 Kalman runs came out the same bit for bit,
    tested to rounding). On one thread the blocks are cheaper than MKL's whole product for
    the few columns of H a step has; with more threads they cost more than they save
    (docs/training.md has the figures), and a GPU takes the whole product.
    """
    n = P.shape[0]
    if P.device.type != "cpu" or n <= CPU_ROW_BLOCK or torch.get_num_threads() > 1:
        return P @ H
    X = P.new_empty((n, H.shape[1]))
    for start in range(0, n, CPU_ROW_BLOCK):
        stop = min(start + CPU_ROW_BLOCK, n)
        torch.mm(P[start:stop], H, out=X[start:stop])
    return X


def make_kalman(model: HDNNP, spec: TrainingSpec, updates_per_epoch: int) -> KalmanFilter:
    """The filter of ``spec``; per-epoch τ's are divided by the updates per epoch (as n2p2)."""
    n = max(1, updates_per_epoch)
    return KalmanFilter(
        [p for p in model.parameters() if p.requires_grad],
        epsilon=spec.kalman_epsilon,
        q0=spec.kalman_q0,
        q_tau=spec.kalman_qtau / n,
        q_min=spec.kalman_qmin,
        eta0=spec.kalman_eta,
        eta_tau=spec.kalman_etatau / n,
        eta_max=spec.kalman_etamax,
    )


def _flat(
    grads: tuple[torch.Tensor | None, ...], params: list[torch.Tensor], m: int
) -> torch.Tensor:
    """Batched per-parameter gradients (m, *p.shape) → one Jacobian (n, m)."""
    cols = [
        (g if g is not None else p.new_zeros((m, *p.shape))).reshape(m, -1)
        for g, p in zip(grads, params, strict=True)
    ]
    return torch.cat(cols, dim=1).T


class Observations(NamedTuple):
    """One update's rows: Jacobian (n, m), errors (m,), and the batch's predictions."""

    H: torch.Tensor  # (n, m) ∂y/∂w
    xi: torch.Tensor  # (m,) y_ref − y
    energy: torch.Tensor  # (S,) eV, before the update
    forces: torch.Tensor | None  # (N, 3) eV/Å, before the update


def observations(
    model: HDNNP,
    params: list[torch.Tensor],
    batch: Batch,
    spec: TrainingSpec,
    forces: bool,
    pick: torch.Tensor | None = None,
) -> Observations:
    """The Kalman rows of ``batch``: energies per atom, then force components.

    Rows are in units of the model's ``energy_scale`` s (so they are O(1)): each
    structure's (E_ref − E)/(N·s) and, for ``kalman_force_components`` random finite force
    components per structure (or the flat indices ``pick`` = 3·atom + axis),
    √force_weight·(F_ref − F)/s — the residuals whose squares make the training loss.

    A force component is linear in g = ∂E/∂G: F_m = ⟨D_m, g⟩ with D_m = ∂F_m/∂g read off
    the stored ∂G/∂r of the pairs that touch the atom (:func:`force_cotangents`), so its
    weight gradient is the vector–Jacobian product of g with D_m through the small
    per-atom networks, never through the pair arrays.
    """
    from dparallel.descriptors import forces_from_derivatives

    features = batch.features or {}
    keys = list(features)
    values = {k: features[k].values.detach().requires_grad_(forces) for k in keys}
    atom_index = {k: features[k].atom_index for k in keys}
    with torch.enable_grad():
        energy = model(values, atom_index, batch.structure_index, batch.n_structures)  # (S,)
        s = float(model.energy_scale)
        ok_e = torch.isfinite(batch.energy)
        y_e = (energy / batch.atom_counts / s)[ok_e]  # (S',)
        # float64 energies (a float32 model's too): the difference, small, is then cast
        xi = [((batch.energy - energy.detach()) / batch.atom_counts / s)[ok_e].to(params[0].dtype)]
        eye = torch.eye(len(y_e), dtype=energy.dtype, device=energy.device)
        jac = [
            _flat(batched_grad([y_e], params, [eye]), params, len(y_e))
            if len(y_e)  # a batch of structures without energies: force rows only
            else energy.new_zeros((sum(p.numel() for p in params), 0))
        ]
        if not forces:
            return Observations(torch.cat(jac, 1), torch.cat(xi), energy.detach(), None)
        inputs = [values[k] for k in keys]
        g = torch.autograd.grad(
            energy.sum(), inputs, retain_graph=True, create_graph=True, allow_unused=True
        )
        g_leaf = {
            k: gk.detach() if gk is not None else torch.zeros_like(values[k])
            for k, gk in zip(keys, g, strict=True)
        }  # ∂E/∂G of each element
        predicted = forces_from_derivatives(g_leaf, features, batch.n_atoms)  # (N, 3)
        if pick is None and spec.force_weight > 0:
            finite = torch.isfinite(batch.forces).reshape(-1).nonzero().squeeze(1)
            k = min(spec.kalman_force_components * batch.n_structures, finite.numel())
            # drawn by the CPU generator on every device (a resumed run draws the same)
            perm = torch.randperm(finite.numel())[:k].to(finite.device)
            pick = finite[perm]  # (k,) flat components
        if pick is not None and pick.numel():
            k = pick.numel()
            w = math.sqrt(spec.force_weight) / s
            d = force_cotangents(features, keys, pick, g_leaf, batch.n_atoms)  # [(k, n_e, F_e)]
            used = [i for i, gk in enumerate(g) if gk is not None and gk.requires_grad]
            jf = batched_grad([g[i] for i in used], params, [d[i] for i in used])
            jac.append(_flat(jf, params, k) * w)
            xi.append((batch.forces.reshape(-1)[pick] - predicted.reshape(-1)[pick]) * w)
    return Observations(torch.cat(jac, 1), torch.cat(xi), energy.detach(), predicted)


def kalman_step(
    model: HDNNP,
    kf: KalmanFilter,
    batch: Batch,
    spec: TrainingSpec,
    forces: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """One combined energy + force Kalman update on ``batch`` (rows: :func:`observations`).

    Returns the energies (S,) and forces (N, 3) before the update and the loss they give
    (:func:`dparallel.train.objective.loss`).
    """
    obs = observations(model, kf.params, batch, spec, forces)
    value = loss(obs.energy, obs.forces, batch, spec.force_weight)
    if obs.xi.numel():  # no label in the batch: nothing observed, no update
        kf.update(obs.H, obs.xi)
    return obs.energy, obs.forces, value


def batched_grad(
    outputs: list[torch.Tensor], inputs: list[torch.Tensor], cotangents: list[torch.Tensor]
) -> tuple[torch.Tensor, ...]:
    """Vector–Jacobian products of ``outputs`` for a batch of ``cotangents`` (each
    (m, *output.shape)): per input an (m, *input.shape) tensor (zeros where unused).

    One backward pass under ``torch.func.vmap``: autograd's own ``is_grads_batched`` uses
    the legacy vmap, which has no batching rule for ``tanh_backward``, ``index_select`` or
    ``index_put`` and runs those once per row (a thousand small operations per Kalman
    update, each a kernel launch on a GPU).
    """

    def vjp(*rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.autograd.grad(
            outputs, inputs, grad_outputs=list(rows), retain_graph=True, allow_unused=True,
            materialize_grads=True,
        )  # fmt: skip

    return tuple(torch.func.vmap(vjp)(*cotangents))


def force_cotangents(
    features: Mapping[str, Any],
    keys: list[str],
    components: torch.Tensor,
    like: Mapping[str, torch.Tensor],
    n_atoms: int,
) -> tuple[torch.Tensor, ...]:
    """D_m = ∂F_m/∂(∂E/∂G) for flat force components ``components`` (k,) = 3·atom + axis.

    With s_p = Σ_a ∂E/∂G_{c(p),a} ∂G_{c(p),a}/∂r_p per pair p (centre row c(p)) and
    F = −Σ_p ([second_p = atom] − [first_p = atom]) s_p (``forces_from_derivatives``),
    D_m[c(p), a] = −([second_p = atom_m] − [first_p = atom_m]) ∂G_{c(p),a}/∂r_p[axis_m].
    Returns one (k, n_e, F_e) tensor per element of ``keys`` (shaped like ``like[e]``).
    Only the pairs touching a picked atom (of the batch's ``n_atoms``) are compared with
    each component's atom, not every pair (k × P comparisons).
    """
    k = components.numel()
    atom, axis = components // 3, components % 3  # (k,)
    picked = torch.zeros(n_atoms, dtype=torch.bool, device=components.device)
    picked[atom] = True
    out = []
    for elem in keys:
        res, ref = features[elem], like[elem]
        d = ref.new_zeros((k, *ref.shape))  # (k, n_e, F_e)
        for pd in res.pairs.values():
            if pd.feature_index.numel() == 0 or pd.pair_first.numel() == 0:
                continue
            # the pairs touching a picked atom, in order (so m, p come as over all pairs)
            near = (picked[pd.pair_first] | picked[pd.pair_second]).nonzero().squeeze(1)
            first, second = pd.pair_first[near], pd.pair_second[near]
            coef = (first[None, :] == atom[:, None]).to(ref.dtype) - (
                second[None, :] == atom[:, None]
            ).to(ref.dtype)  # (k, C): −([second = atom] − [first = atom])
            m, c = coef.nonzero(as_tuple=True)  # pairs touching each picked atom
            p = near[c]
            rows = (
                pd.dG_dr[p, :, :]
                .gather(2, axis[m][:, None, None].expand(-1, pd.dG_dr.shape[1], 1))
                .squeeze(2)
            )  # (nnz, F_ef)
            d.index_put_(
                (m[:, None], pd.center[p][:, None], pd.feature_index[None, :]),
                coef[m, c][:, None] * rows.to(ref.dtype),
                accumulate=True,
            )
        out.append(d)
    return tuple(out)
