"""Energy, forces and virial of an ACSF potential through the compiled kernels (inference).

The engine :meth:`dparallel.deploy.DeployedModel.predict` takes on the CPU when the ACSF
backend is numba (:func:`acsf_engine`): float64 tanh networks run inside the kernel (per
central atom: descriptors, ∂E/∂G, forces and virial at once); otherwise per central element,
block by block of its atoms (:data:`~dparallel.deploy.blocks.BLOCK_BYTES` of ∂G/∂r at once,
whatever the cell's size), the kernel's values and ∂G/∂r_ij, the networks (numpy, or torch
autograd), then one compiled pass into forces and virial
(:mod:`dparallel.kernels.pair_forces`). The element bookkeeping is computed once per
neighbour list (a Verlet list keeps its pairs for many MD steps). Same numbers as the torch
route (tested against autograd and finite differences).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from dparallel.deploy.blocks import BLOCK_BYTES, centre_blocks
from dparallel.deploy.identical import identical
from dparallel.descriptors import ACSF, KernelCall, numba_element
from dparallel.kernels.acsf_numba import NetworkForces, acsf_element, no_split
from dparallel.kernels.pair_forces import add_pair_forces
from dparallel.kernels.pair_select import ElementPairs

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dparallel.neighbors import Neighbors
    from dparallel.nn import HDNNP
    from dparallel.types import StructureBatch


class _Layout(NamedTuple):
    """Element bookkeeping of one (structure batch, neighbour list)."""

    pair_first: np.ndarray  # the neighbour list's array this layout belongs to (identity)
    numbers: np.ndarray  # (N,) atomic numbers it was made for
    atoms: list[np.ndarray]  # per element e: (n_e,) global rows, ascending
    local: np.ndarray  # (N,) row of each atom within its element
    pairs: list[np.ndarray]  # per element e: (P_e,) pairs whose centre has element e
    neighbor_el: np.ndarray  # (P,) element index of each pair's neighbour j
    segs: list[np.ndarray]  # per element e: (n_e + 1,) range of each centre in pairs[e]
    whole: list[bool]  # per element e: pairs[e] is every pair, in order
    offsets: np.ndarray  # (S + 1,) the batch's structure offsets it was made for
    structure_index: np.ndarray  # (N,) structure of each atom


# NetworkForces's network fields: on, layers, params, shift, factor, consts, width
_Tables = tuple[bool, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]


class _TanhNetwork:
    """One element's network as numpy arrays: energies and ∂E/∂G without autograd.

    For networks of ``Linear``, ``DivideBy`` (normalize_nodes) and ``Tanh`` layers only
    (dparallel's default); :meth:`of` returns None for any other layer. The arrays share
    memory with the module's parameters and buffers, so in-place updates are seen.
    """

    def __init__(self, layers: list[tuple[str, Any]], shift: np.ndarray, factor: np.ndarray,
                 offset: float, scale: np.ndarray, ref: np.ndarray,
                 tensors: tuple[torch.Tensor, ...] = ()) -> None:  # fmt: skip
        self.layers, self.shift, self.factor = layers, shift, factor
        self.offset = offset
        self.scale, self.ref = scale, ref  # () and (1,) views of the module's buffers
        self.tensors = tensors  # the module's tensors behind these arrays (version counters)
        self._tables: tuple[tuple[int, ...], _Tables] | None = None

    @classmethod
    def of(cls, model: HDNNP, k: int, e: str) -> _TanhNetwork | None:
        from dparallel.nn import DivideBy

        layers: list[tuple[str, Any]] = []
        tensors = [getattr(model, f"shift_{e}"), getattr(model, f"factor_{e}"),
                   model.energy_scale, model.ref_energy]  # fmt: skip
        for layer in model.nets[e].children():
            if isinstance(layer, torch.nn.Linear) and layer.bias is not None:
                w, b = layer.weight.detach().numpy(), layer.bias.detach().numpy()
                layers.append(("linear", (w, b)))
                tensors += [layer.weight, layer.bias]
            elif isinstance(layer, DivideBy):
                layers.append(("divide", layer.n))
            elif isinstance(layer, torch.nn.Tanh):
                layers.append(("tanh", None))
            else:
                return None
        return cls(
            layers,
            getattr(model, f"shift_{e}").detach().numpy(),
            getattr(model, f"factor_{e}").detach().numpy(),
            float(model.feature_offset),
            model.energy_scale.detach().numpy(),
            model.ref_energy[k : k + 1].detach().numpy(),
            tuple(tensors),
        )

    def fused(self, r_max: float, first: np.ndarray, second: np.ndarray, structure: np.ndarray,
              grad: np.ndarray, virial: np.ndarray,
              energies: np.ndarray) -> NetworkForces:  # fmt: skip
        """This network as the kernel's :class:`~dparallel.kernels.acsf_layout.NetworkForces`
        tables, writing into the given arrays. The tables (~3k numbers) are built once and
        rebuilt only after an in-place change of the module's parameters or buffers (their
        torch version counters moved): building them is a noticeable part of an MD step
        (docs/deploy.md)."""
        versions = tuple(t._version for t in self.tensors)
        if self._tables is None or self._tables[0] != versions:
            self._tables = (versions, self._build_tables())
        tables = self._tables[1]
        return NetworkForces(*tables, r_max, first, second, structure, grad, virial, energies)

    def _build_tables(self) -> _Tables:
        """(on, layers, params, shift, factor, consts, width) of :class:`NetworkForces`."""
        rows, params, n, width, size = [], [], self.shift.shape[0], self.shift.shape[0], 0
        for kind, p in self.layers:
            if kind == "linear":
                rows.append((0, n, p[0].shape[0], size))
                params += [p[0].ravel(), p[1]]
                size += p[0].size + p[1].size
                n = p[0].shape[0]
            elif kind == "divide":
                rows.append((1, n, n, size))
                params.append(np.array([p], dtype=np.float64))
                size += 1
            else:
                rows.append((2, n, n, 0))
            width = max(width, n)
        return (
            True, np.array(rows, dtype=np.int64).reshape(-1, 4),
            np.concatenate(params).astype(np.float64),
            self.shift.astype(np.float64), self.factor.astype(np.float64),
            np.array([self.offset, float(self.scale), float(self.ref[0])]), width,
        )  # fmt: skip

    def __call__(self, g: np.ndarray, need: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Atomic energies (n,) and, if ``need``, ∂E/∂G (n, F) of descriptors g (n, F)."""
        h = (g - self.shift) * self.factor
        if self.offset != 0.0:
            h = h + self.offset
        saved = []
        for kind, p in self.layers:
            if kind == "linear":
                h = h @ p[0].T + p[1]
            elif kind == "divide":
                h = h / p
            else:
                h = np.tanh(h)
                saved.append(h)
        energies = (h[:, 0] * self.scale).astype(np.float64) + self.ref[0]  # ref: float64
        if not need:
            return energies, None
        grad = np.full((g.shape[0], 1), self.scale, dtype=g.dtype)  # ∂E/∂(last layer)
        for kind, p in reversed(self.layers):
            if kind == "linear":
                grad = grad @ p[0]
            elif kind == "divide":
                grad = grad / p
            else:
                y = saved.pop()
                grad = grad * (1.0 - y * y)
        return energies, grad * self.factor


class ACSFForces:
    """Energies, forces and virial of (ACSF, HDNNP) with the compiled kernels.

    ``descriptor`` and ``model`` are a ``DeployedModel``'s; ``dtype`` (``torch.float64`` or
    ``torch.float32``) the precision of descriptors and networks (forces and virial are
    accumulated in float64; energies are float64, as the model's reference energies).
    """

    def __init__(self, descriptor: ACSF, model: HDNNP, dtype: torch.dtype) -> None:
        self.acsf = descriptor
        self.model = model
        self.dtype = dtype
        self.elements = descriptor.elements
        plans = descriptor.plans()
        self.plans = [plans[e] for e in self.elements]
        self.feature_index = [
            {f: np.asarray(p.deriv_groups[f][0], dtype=np.int64) for f in p.deriv_groups}
            for p in self.plans
        ]
        self.n_el = len(self.elements)
        self._layout: _Layout | None = None
        self.networks = {
            e: _TanhNetwork.of(model, k, e) for k, e in enumerate(model.elements)
        }  # None: that element's network runs through torch autograd
        self.fuse = True  # float64 numpy networks: energy and forces in one kernel pass
        self.block_bytes = BLOCK_BYTES  # ∂G/∂r held at once per element (unfused route)

    def layout(self, batch: StructureBatch, nb: Neighbors) -> _Layout:
        """The element bookkeeping of ``nb``: reused while the neighbour list is the same."""
        old = self._layout
        if (
            old is not None
            and old.pair_first is nb.pair_first
            and identical(old.numbers, batch.numbers)
            and identical(old.offsets, batch.offsets)
        ):
            return old
        el = self.acsf.element_index(batch)  # (N,); names a bad atomic number
        atoms = [np.flatnonzero(el == k) for k in range(self.n_el)]
        local = np.zeros(batch.n_atoms, dtype=np.int64)
        for rows in atoms:
            local[rows] = np.arange(rows.shape[0])
        centre_el = el[nb.pair_first]
        pairs = [np.flatnonzero(centre_el == k) for k in range(self.n_el)]
        segs = []
        for k, rows in enumerate(atoms):  # pairs are sorted by centre
            counts = np.bincount(local[nb.pair_first[pairs[k]]], minlength=rows.shape[0])
            segs.append(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
        whole = [p.shape[0] == nb.pair_first.shape[0] for p in pairs]
        made = _Layout(
            nb.pair_first, batch.numbers.copy(), atoms, local, pairs, el[nb.pair_second],
            segs, whole, batch.offsets.copy(), batch.structure_index,
        )  # fmt: skip
        self._layout = made  # (not returned from self: another thread may replace it)
        return made

    def __call__(
        self, batch: StructureBatch, nb: Neighbors, forces: bool, stress: bool
    ) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
        """Outputs as ``DeployedModel.predict`` (``energy``, ``energies``, ``forces``)
        and the virial (S, 3, 3) eV when ``stress`` (else None)."""
        need = forces or stress
        if (
            need
            and self.fuse
            and self.dtype == torch.float64
            and all(self.networks[e] is not None for e in self.model.elements)
        ):
            return self._fused(batch, nb, forces, stress)
        pf, ps, sidx = nb.pair_first, nb.pair_second, batch.structure_index
        per_atom = np.zeros(batch.n_atoms)  # float64, as the reference energies
        grad = np.zeros((batch.n_atoms, 3))  # ∂E/∂r, eV/Å
        virial = np.zeros((batch.n_structures if stress else 0, 3, 3))
        for k, e, rows, sel, center, values, groups in self.descriptors(batch, nb, need):
            atomic, de_dg = self._network(e, values, need)
            per_atom[rows] = atomic
            for f, (sub, dg) in (groups or {}).items():
                pairs = sel[sub]
                add_pair_forces(
                    de_dg, center[sub], self.feature_index[k][f], dg, pf[pairs], ps[pairs],
                    nb.vectors[pairs], sidx, grad, virial,
                )  # fmt: skip
        energy = np.bincount(sidx, weights=per_atom, minlength=batch.n_structures)
        out = {"energy": energy.astype(np.float64, copy=False), "energies": per_atom}
        if not need:
            return out, None
        if forces:
            np_dtype = np.float64 if self.dtype == torch.float64 else np.float32
            out["forces"] = (-grad).astype(np_dtype, copy=False)
        return out, (virial if stress else None)

    def _fused(
        self, batch: StructureBatch, nb: Neighbors, forces: bool, stress: bool
    ) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
        """:meth:`__call__` in float64 with the networks inside the kernel: per centre the
        descriptors, then ∂E/∂G, then forces and virial at once (no dG/dr arrays)."""
        lay = self.layout(batch, nb)
        sidx = lay.structure_index
        per_atom = np.zeros(batch.n_atoms)
        grad = np.zeros((batch.n_atoms, 3))  # ∂E/∂r, eV/Å
        virial = np.zeros((batch.n_structures if stress else 0, 3, 3))
        none = np.zeros(0, dtype=np.int64)
        work = np.empty(0)
        for k, (e, plan) in enumerate(zip(self.elements, self.plans, strict=True)):
            rows = lay.atoms[k]
            if e not in self.model.elements or rows.shape[0] == 0:
                continue
            energies = np.empty(rows.shape[0])
            network = self.networks[e]
            assert network is not None
            if lay.whole[k]:  # the kernel skips pairs beyond the cutoff itself
                pf, ps, nel = nb.pair_first, nb.pair_second, lay.neighbor_el
                vec = np.ascontiguousarray(nb.vectors, dtype=np.float64)  # no copy if so
                dist = np.ascontiguousarray(nb.distances, dtype=np.float64)
            else:
                sel = lay.pairs[k]
                pf, ps, vec, dist, nel = (
                    nb.pair_first[sel], nb.pair_second[sel], nb.vectors[sel],
                    nb.distances[sel], lay.neighbor_el[sel],
                )  # fmt: skip
            fused = network.fused(plan.r_max, pf, ps, sidx, grad, virial, energies)
            values = np.empty((rows.shape[0], plan.n_features))
            acsf_element(
                plan.kernel, vec, dist, lay.segs[k], nel, none, none, values, work, True,
                work, fused, no_split(),
            )  # fmt: skip
            per_atom[rows] = energies
        energy = np.bincount(sidx, weights=per_atom, minlength=batch.n_structures)
        # (numpy's bincount of no atoms is int64 whatever the weights)
        out = {"energy": energy.astype(per_atom.dtype, copy=False), "energies": per_atom}
        if forces:
            out["forces"] = -grad
        return out, (virial if stress else None)

    def descriptors(
        self, batch: StructureBatch, nb: Neighbors, derivatives: bool
    ) -> Iterator[tuple]:
        """Per element of the model present in ``batch``, block by block of its centres
        (:func:`centre_blocks`: ∂G/∂r of about ``block_bytes`` at once, not of every pair of a
        large cell): (element index, element, the block's atom rows (n_b,), its
        pairs (P_b,) in the cutoff, their centre rows in the block (P_b,), values
        (n_b, F_e), derivative groups {f: (rows into the P_b pairs, dG_dr (P_bf, F_ef, 3))}
        or None)."""
        lay = self.layout(batch, nb)
        call = KernelCall(derivatives, np.float64 if self.dtype == torch.float64 else np.float32)
        for k, (e, plan) in enumerate(zip(self.elements, self.plans, strict=True)):
            atoms, seg = lay.atoms[k], lay.segs[k]
            if e not in self.model.elements or atoms.shape[0] == 0:
                continue
            per_pair = 3 * np.dtype(call.dtype).itemsize * plan.n_features  # ∂G/∂r bytes
            limit = self.block_bytes // per_pair if derivatives else int(seg[-1])
            for a, b in centre_blocks(seg, limit):
                sel = lay.pairs[k][seg[a] : seg[b]]
                sel = sel[nb.distances[sel] < plan.r_max]  # (P_b,) pairs in the cutoff
                center = lay.local[nb.pair_first[sel]] - a
                pairs = ElementPairs(
                    sel, center, lay.neighbor_el[sel], nb.vectors[sel], nb.distances[sel]
                )
                values, groups = numba_element(plan, pairs, b - a, call)
                yield k, e, atoms[a:b], sel, center, values, groups

    def _network(self, e: str, values: np.ndarray, need: bool) -> tuple[np.ndarray, Any]:
        """Atomic energies (n,) and, if ``need``, ∂E/∂G (n, F) of element ``e``'s
        descriptors ``values`` (n, F): numpy, or torch autograd for other activations."""
        net = self.networks[e]
        if net is not None:
            return net(values, need)
        inputs = torch.from_numpy(values).requires_grad_(need)
        with torch.enable_grad():
            energies = self.model.atomic_energies({e: inputs})[e]
            if not need:
                return energies.detach().numpy(), None
            (de_dg,) = torch.autograd.grad(energies.sum(), [inputs])
        return energies.detach().numpy(), de_dg.numpy()


def acsf_engine(
    descriptor: object, model: HDNNP, dtype: torch.dtype, backend: str
) -> ACSFForces | None:
    """:class:`ACSFForces` for an :class:`ACSF` whose ``backend`` resolves to numba, else None
    (another descriptor type, or the torch or Triton backend: the deployed model's torch route)."""
    if not isinstance(descriptor, ACSF) or ACSF.resolve_backend(backend) != "numba":
        return None
    return ACSFForces(descriptor, model, dtype)
