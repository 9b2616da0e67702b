"""The deployed potential: energy, forces and stress of a (descriptor, HDNNP) pair.

:class:`DeployedModel` (``MODEL_DIR/deployed.pt``) is what ``dparallel.ase.Calculator``
and ``dparallel evaluate`` use. It reaches its descriptor only through the descriptor
registry's protocol (:class:`~dparallel.descriptors.registry.DescriptorKind`), so every
registered type works:

* :meth:`DeployedModel.predict`: the descriptor's ``compute`` with analytic ∂G/∂r_ij per
  pair, dE/dG by autograd, F = −Σ (∂E/∂G)(∂G/∂r) and the virial from the same pair terms,
  block by block of centre atoms (:attr:`DeployedModel.block_bytes` of ∂G/∂r at once);
  on the CPU a compiled engine of :data:`ENGINES` takes over when one takes the descriptor
  (ACSF through numba: :mod:`dparallel.deploy.acsf_forces`).
* :meth:`DeployedModel.energy` with ``positions``: the autograd route (F = −∂E/∂positions)
  through the type's torch graph form (``DescriptorKind.graph``); tests check one route
  against the other and against finite differences.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from dparallel.deploy.blocks import BLOCK_BYTES, centre_batches
from dparallel.deploy.potential import graph_energies
from dparallel.deploy.split import Engine, Outputs, threaded
from dparallel.descriptors import forces_from_derivatives, virial_from_derivatives
from dparallel.descriptors.registry import descriptor_graph, kind_of, recorded_kind
from dparallel.descriptors.species import species_index
from dparallel.errors import DescriptorError, TrainingError
from dparallel.kernels._backends.availability import unknown_backend
from dparallel.neighbors import Neighbors, in_centre_order, neighbor_list
from dparallel.nn import (
    HDNNP,
    MODEL,
    file_not_model_dir,
    is_n2p2_potential,
    load_torch_file,
    n2p2_files_missing,
    not_a_torch_file,
    resume_hint,
    save_torch_file,
)
from dparallel.nn.device import resolve_device
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterable

    import ase

#: File name of the deployable model inside MODEL_DIR.
DEPLOYED = "deployed.pt"

log = logging.getLogger(__name__)


def _acsf_numba(descriptor: Any, model: HDNNP, dtype: torch.dtype, backend: str) -> Engine | None:
    from dparallel.deploy.acsf_forces import acsf_engine  # numba: loaded on first use

    return acsf_engine(descriptor, model, dtype, backend)


#: Compiled CPU engines of :meth:`DeployedModel.predict`, asked in order:
#: ``factory(descriptor, model, dtype, backend)`` returns an :class:`Engine` when it takes
#: this descriptor with this ``backend``, else None (the next is asked; none: the torch
#: route, which every registered descriptor type has). ``"acsf_numba"``: ACSF through the
#: compiled kernel with the networks fused in (:mod:`dparallel.deploy.acsf_forces`).
ENGINES: dict[str, Callable[[Any, HDNNP, torch.dtype, str], Engine | None]] = {
    "acsf_numba": _acsf_numba
}


class DeployedModel(nn.Module):
    """Descriptor (of any registered type) + HDNNP: a self-contained potential.

    ``descriptor`` is the one the trained :class:`HDNNP` ``model`` was trained on (its
    elements must be among the descriptor's); ``dtype`` the precision of descriptors and
    networks; ``device`` where :meth:`predict` runs the networks and sums forces and virial
    (``cpu``, ``cuda``, ``cuda:N``, ``auto``; descriptors are computed on the CPU).
    """

    def __init__(
        self,
        descriptor: Any,
        model: HDNNP,
        dtype: torch.dtype = torch.float64,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__()
        self.descriptor = descriptor
        self.kind = kind_of(descriptor)  # a DescriptorError for an unregistered type
        self.device = resolve_device(device)
        self.model = model.to(device=self.device, dtype=dtype)
        self.dtype = dtype
        for e in model.elements:
            if e not in descriptor.elements:
                raise TrainingError(
                    f"model element {e} not in the descriptor's {descriptor.elements}"
                )
        self._engines: dict[str, Engine | None] = {}  # backend → engine (None: torch)
        self._engines_at: tuple[int, ...] | None = None  # where those were in memory
        #: ∂G/∂r bytes the torch route holds at once (:meth:`_predict_torch`); larger blocks
        #: are fewer, smaller ones bound the peak memory of a large cell more tightly
        self.block_bytes = BLOCK_BYTES

    def __getstate__(self) -> dict[str, Any]:
        """The model for pickle (a multiprocessing pool, Dask) and ``copy.deepcopy``, without
        its engines: they read the module's tensors' memory, which pickling may move
        (multiprocessing moves it to shared memory) and which is another process's there."""
        state = self.__dict__.copy()
        state["_engines"], state["_engines_at"] = {}, None
        return state

    def _tensor_places(self) -> tuple[int, ...]:
        """Where the network's parameters and buffers are in memory."""
        tensors = (*self.model.parameters(), *self.model.buffers())  # what engines read
        return tuple(t.data_ptr() for t in tensors)

    @property
    def cutoff(self) -> float:
        """Neighbour-list cutoff (Å)."""
        return float(self.descriptor.r_cut)

    def neighbors(self, batch: StructureBatch) -> Neighbors:
        """Neighbour list of ``batch`` (computed outside the differentiable graph)."""
        return neighbor_list(batch, self.cutoff)

    def _compute(self, batch: StructureBatch, nb: Neighbors, derivatives: bool, backend: str):  # noqa: ANN202
        """The descriptor's results per element (values, and per-pair derivatives if asked)."""
        options = {}
        if backend != "auto":
            if backend not in self.kind.backends:
                valid = ("auto", *self.kind.backends)
                raise unknown_backend(self.kind.name, backend, valid, "backend= argument")
            options["backend"] = backend
        return self.descriptor.compute(
            batch, derivatives=derivatives, neighbors=nb, dtype=self.dtype, **options
        )

    def energy(
        self, batch: StructureBatch, positions: torch.Tensor, neighbors: Neighbors | None = None
    ) -> torch.Tensor:
        """Energies (S,) eV; differentiable with respect to ``positions`` (N, 3) Å.

        The pair vectors are made from ``positions`` inside the autograd graph and the
        descriptor's torch graph form (``DescriptorKind.graph``) computes the features.
        """
        nb = in_centre_order(neighbors) if neighbors is not None else self.neighbors(batch)
        sidx = torch.from_numpy(batch.structure_index)
        graph = self.__dict__.get("_graph")
        if graph is None:
            graph = self.__dict__["_graph"] = descriptor_graph(self.descriptor)
        pos = positions.to(self.dtype)
        pf, ps = torch.from_numpy(nb.pair_first), torch.from_numpy(nb.pair_second)
        cells = torch.from_numpy(batch.cells).to(self.dtype)[sidx[pf]]  # (P, 3, 3)
        shift = torch.einsum("pa,pab->pb", torch.from_numpy(nb.shifts).to(self.dtype), cells)
        vectors = pos[ps] - pos[pf] + shift  # (P, 3)
        species = torch.from_numpy(species_index(batch, graph.elements))  # (N,)
        energies = graph_energies(graph, self.model, vectors, pf, ps, species)  # (N,)
        return energies.new_zeros(batch.n_structures).index_add(0, sidx, energies)

    forward = energy  # the module's call: the autograd route

    def engine(self, backend: str = "auto") -> Engine | None:
        """The compiled CPU engine of :data:`ENGINES` that takes this descriptor with
        ``backend`` (made once per backend, and again once the module's tensors moved in
        memory; it caches per neighbour list), or None: the torch route."""
        places = self._tensor_places()
        if places != self._engines_at:  # e.g. sent to a pool: moved to shared memory
            self._engines, self._engines_at = {}, places
        if backend not in self._engines:
            made = (f(self.descriptor, self.model, self.dtype, backend) for f in ENGINES.values())
            self._engines[backend] = next((e for e in made if e is not None), None)
        return self._engines[backend]

    def _predict_torch(
        self, batch: StructureBatch, nb: Neighbors, forces: bool, stress: bool, backend: str
    ) -> Outputs:
        """:meth:`predict` through torch ops: outputs and the virial (S, 3, 3) if ``stress``.

        Block by block of centre atoms (:func:`~dparallel.deploy.blocks.centre_batches`,
        :attr:`block_bytes` of ∂G/∂r each): a block's descriptors and ∂G/∂r, its networks'
        energies and ∂E/∂G (autograd on the block's rows only, the graph freed with the
        block), its pair terms added into forces and virial. Index bookkeeping is on the
        host; on a GPU a block costs its host-to-device copies and no synchronisation."""
        need = forces or stress
        dev = self.device
        per_pair = 3 * self.dtype.itemsize * max(self.model.n_features.values(), default=1)
        out_dtype = torch.promote_types(self.dtype, self.model.ref_energy.dtype)  # float64
        sidx = torch.from_numpy(batch.structure_index).to(dev)
        energy = torch.zeros(batch.n_structures, dtype=out_dtype, device=dev)
        per_atom = torch.zeros(batch.n_atoms, dtype=out_dtype, device=dev)
        force = torch.zeros(batch.n_atoms if forces else 0, 3, dtype=self.dtype, device=dev)
        virial = torch.zeros(batch.n_structures if stress else 0, 3, 3, dtype=self.dtype,
                             device=dev)  # fmt: skip
        for part in centre_batches(batch, nb, max(1, self.block_bytes // per_pair)):
            res = self._compute(part.batch, part.neighbors, need, backend)
            keep, at = {}, {}  # per element: rows of the block's centres, their batch rows
            for e, r in res.items():
                index = r.atom_index.cpu().numpy()
                rows = np.flatnonzero(part.centre[index])
                if len(rows):
                    keep[e] = torch.from_numpy(rows).to(dev)
                    at[e] = torch.from_numpy(part.atoms[index[rows]]).to(dev)
            if dev.type != "cpu":
                res = {e: r.to(dev) for e, r in res.items()}
            values = {
                e: res[e].values.index_select(0, k).detach().requires_grad_(need)
                for e, k in keep.items()
            }
            with torch.enable_grad():
                atomic = self.model.atomic_energies(values)
                total = energy.new_zeros(())
                for e, ei in atomic.items():
                    per_atom = per_atom.index_put((at[e],), ei.detach())
                    energy = energy.index_add(0, sidx.index_select(0, at[e]), ei.detach())
                    total = total + ei.sum()
                if not need or not keep:
                    continue
                grads = torch.autograd.grad(total, [values[e] for e in keep])
            dE_dG = {  # rows of every atom of the block's batch (its neighbours': 0)
                e: g.new_zeros(res[e].values.shape).index_copy(0, keep[e], g)
                for e, g in zip(keep, grads, strict=True)
            }
            sub = {e: res[e] for e in keep}
            atoms = torch.from_numpy(part.atoms).to(dev)  # the block's rows in the batch
            if forces:
                part_forces = forces_from_derivatives(dE_dG, sub, len(part.atoms))
                force = force.index_add(0, atoms, part_forces.to(force.dtype))
            if stress:
                part_sidx = sidx.index_select(0, atoms)
                w = virial_from_derivatives(dE_dG, sub, part_sidx, batch.n_structures)
                virial = virial + w.to(virial.dtype)
        out: dict[str, np.ndarray] = {
            "energy": energy.cpu().numpy(),
            "energies": per_atom.cpu().numpy(),
        }
        if forces:
            out["forces"] = force.cpu().numpy()
        return out, (virial.cpu().numpy() if stress else None)

    def predict(
        self,
        batch: StructureBatch | ase.Atoms | Iterable[ase.Atoms],
        *,
        forces: bool = True,
        stress: bool = False,
        neighbors: Neighbors | None = None,
        backend: str = "auto",
        threads: int | None = None,
    ) -> dict[str, np.ndarray]:
        """Energy (S,) eV, forces (N, 3) eV/Å, stress (S, 3, 3) eV/Å³ (periodic cells).

        Stress is σ = (1/V) ∂E/∂ε = −W/V with the virial W from the pair terms; it is NaN
        for structures without a 3-D periodic cell. Also ``energies`` (N,) per atom.
        ``neighbors`` may hold pairs beyond the cutoff (a list with a skin): they are ignored.
        ``backend``: the descriptor's backend (``"auto"`` or one of the registered type's
        ``backends``; ACSF: ``"numba"``, ``"torch"``, ``"triton"``).
        ``threads``: on the CPU's compiled engine, the structures are shared among this many
        threads (the numbers of one thread to rounding, as another batch size gives:
        float64 ~1e-16, float32 ~1e-7 relative; ``None``: ``torch.get_num_threads()``, the
        process's thread budget). ``batch`` may be ``ase.Atoms`` or an iterable of them
        (their labels and calculators are not used).
        """
        if not isinstance(batch, StructureBatch):
            batch = StructureBatch.from_ase(batch, labels=False)
        nb = in_centre_order(neighbors) if neighbors is not None else self.neighbors(batch)
        engine = self.engine(backend) if self.device.type == "cpu" else None
        if engine is not None:
            n = torch.get_num_threads() if threads is None else threads
            out, w = threaded(engine, batch, nb, forces, stress, n)
        else:
            out, w = self._predict_torch(batch, nb, forces, stress, backend)
        if w is not None:
            vol = np.abs(np.linalg.det(batch.cells))  # (S,)
            periodic = batch.pbc.all(1) & (vol > 1e-10)
            s = np.full((batch.n_structures, 3, 3), np.nan)
            s[periodic] = -w[periodic] / vol[periodic, None, None]
            out["stress"] = s
        return out

    def outputs(self, structure: Any) -> tuple[torch.Tensor, ...]:
        """(energy, forces, stress, energies) of a probe structure, as the artifacts give them."""
        out = self.predict(StructureBatch.from_ase([structure.atoms]), stress=True)
        return tuple(
            torch.from_numpy(np.asarray(x))
            for x in (out["energy"][0], out["forces"], out["stress"][0], out["energies"])
        )

    def save(
        self,
        path: str | os.PathLike[str],
        trained: str | os.PathLike[str] | None = None,
        dtype: torch.dtype | None = None,
    ) -> Path:
        """Write what :func:`load_deployed` needs (tensors and plain data only) to ``path``
        atomically (``MODEL_DIR/deployed.pt``); ``trained``: the ``model.pt`` it is made
        from, whose digest it keeps (a later training is then noticed on load); ``dtype``:
        the one :func:`load_deployed` uses by default (``None``: this model's)."""
        doc: dict[str, Any] = {
            "format": "dparallel-deployed",
            "version": 2,
            "descriptor_kind": self.kind.name,
            "descriptor": json.dumps(self.descriptor.to_dict()),
            "model_config": json.dumps(self.model.config()),
            "state_dict": self.model.state_dict(),
            "dtype": str(dtype or self.dtype).removeprefix("torch."),
        }
        if trained is not None and Path(trained).is_file():
            doc["model_sha256"] = model_sha256(Path(trained))
        save_torch_file(doc, path)
        return Path(path)


def model_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes: a deployed file's ``model_sha256`` (the ``model.pt`` it
    was exported from), written by :meth:`DeployedModel.save` and by export's report,
    checked by :func:`load_deployed` and :func:`dparallel.train.export.export_needed`."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def still_training(folder: Path, missing: str) -> str | None:
    """Why ``folder`` lacks ``missing`` while a run trains into it (it holds the folder's
    lease), and what to do; ``None`` when no run does."""
    from dparallel.store import lease_holder

    holder = lease_holder(folder)
    if holder is None:
        return None
    return (
        f"{folder} holds no {missing} yet: it is being trained by {holder}; run "
        f"`dparallel export {folder}` when that run has ended"
    )


def _no_deployed(given: Path) -> str:
    """Why ``given`` (a model directory or its ``deployed.pt``) has no deployed model to
    load, and what to do."""
    folder = given if given.is_dir() or given.name != DEPLOYED else given.parent
    if folder.exists() and not folder.is_dir():
        return file_not_model_dir(folder, DEPLOYED)
    if not folder.is_dir():
        return f"{folder} does not exist: give a model directory (with {DEPLOYED}) or its file"
    if (folder / MODEL).is_file():
        return f"{folder} holds no {DEPLOYED}: run `dparallel export {folder}` first"
    if is_n2p2_potential(folder):  # what the calculator and evaluate load by themselves
        return n2p2_files_missing(folder) or (
            f"{folder} is an n2p2 potential, not a deployed dparallel model: load it with "
            "dparallel.n2p2.load_potential, or give the folder to dparallel.ase.Calculator or "
            "`dparallel evaluate`"
        )
    running = still_training(folder, DEPLOYED)
    if running is not None:
        return running
    if (folder / "checkpoint.pt").is_file():  # a training killed before its end
        return (
            f"{folder} holds no {DEPLOYED}: its training stopped before the end; finish it "
            f"with {resume_hint(folder)}, then `dparallel export {folder}`"
        )
    return (
        f"{folder} holds no {DEPLOYED} and no model.pt: is it a model directory (the one "
        "`dparallel train` or `dparallel run` trained into)?"
    )


def load_deployed(
    path: str | os.PathLike[str],
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
) -> DeployedModel:
    """Load ``deployed.pt`` (or MODEL_DIR containing it), evaluating on ``device``."""
    given = Path(path)
    path = given / DEPLOYED if given.is_dir() else given
    if not_a_torch_file(path):  # a structure file, a log, …
        raise TrainingError(file_not_model_dir(path, DEPLOYED))
    if not path.is_file():
        raise TrainingError(_no_deployed(given))
    data = load_torch_file(path, "deployed model")
    trained = path.with_name("model.pt")
    made_from = data.get("model_sha256")
    if made_from and trained.is_file() and model_sha256(trained) != made_from:
        log.warning(
            "%s was exported from an earlier %s (training went on after the export): run "
            "`dparallel export %s` for the latest",
            path,
            trained.name,
            path.parent,
        )
    if data.get("format") != "dparallel-deployed":
        raise TrainingError(f"{path} is not a dparallel deployed model")
    try:
        descriptor = recorded_kind(data).from_dict(json.loads(data["descriptor"]))
    except DescriptorError as exc:
        raise TrainingError(f"{path}: {exc}") from None
    dt = dtype or getattr(torch, data.get("dtype", "float64"))
    model = HDNNP.from_state(json.loads(data["model_config"]), data["state_dict"], dt)
    return DeployedModel(descriptor, model, dt, device)
