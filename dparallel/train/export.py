"""Deployable model: energy, forces and stress from positions, numbers, cell and pbc.

Two deployments of one trained (descriptor, :class:`HDNNP`) pair, ACSF or NeighborSum:

* :class:`DeployedModel` (``MODEL_DIR/deployed.pt``, what ``dparallel.ase.Calculator``
  and ``dparallel evaluate`` use): recomputes the descriptors with their analytic
  ∂G/∂r_ij (numba or torch backend), dE/dG by autograd, F = −Σ (∂E/∂G)(∂G/∂r) and the
  virial from the same pair terms. ``energy(batch, positions)`` is the autograd route
  (F = −∂E/∂positions); tests check one against the other and finite differences.
* plain-torch artifacts (:mod:`dparallel.deploy`): ``potential.pt2`` (torch.export),
  ``potential.ts`` (TorchScript) and, on request, ``potential_aoti.pt2`` (AOTInductor),
  loadable without dparallel; docs/training.md ("Deployment").

:func:`export_model` writes all of them and ``export.json``, which says for every route
whether it worked (and how closely it reproduces the Python model on structures made of
the model's own elements) or the exact reason it did not.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from dparallel._files import remove_file, strict_json, write_file, write_with
from dparallel.descriptors import (
    ACSF,
    NeighborSum,
    forces_from_derivatives,
    virial_from_derivatives,
)
from dparallel.descriptors.registry import descriptor_kind, kind_of
from dparallel.errors import DescriptorError, TrainingError
from dparallel.neighbors import Neighbors, neighbor_list
from dparallel.nn import HDNNP, load_exported_program, load_torch_file
from dparallel.train.device import features_to, resolve_device
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    import os

__all__ = [
    "DEPLOYED",
    "EXPORT_REPORT",
    "DeployedModel",
    "describe_report",
    "export_atomic_energies",
    "export_model",
    "load_atomic_energies",
    "load_deployed",
]

log = logging.getLogger(__name__)

#: File name of the deployable model inside MODEL_DIR.
DEPLOYED = "deployed.pt"
EXPORT_REPORT = "export.json"

Descriptor = ACSF | NeighborSum


def descriptor_from_dict(kind: str, spec: dict[str, Any]) -> Descriptor:
    """The descriptor of a model file: ``kind`` is a registered descriptor type."""
    try:
        descriptor: Descriptor = descriptor_kind(kind).load().from_dict(spec)
    except DescriptorError as exc:
        raise TrainingError(str(exc)) from None
    return descriptor


def _kind(descriptor: Descriptor) -> str:
    return kind_of(descriptor).name


class DeployedModel(nn.Module):
    """Descriptor (ACSF or NeighborSum) + HDNNP: a self-contained potential (float64 default).

    ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``auto``) is where :meth:`predict` runs the
    networks and sums forces and virial; descriptors are computed on the CPU and moved
    there. On the CPU an ACSF model takes the compiled numba route.
    """

    def __init__(
        self,
        descriptor: Descriptor,
        model: HDNNP,
        dtype: torch.dtype = torch.float64,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__()
        self.descriptor = descriptor
        self.device = resolve_device(device)
        self.model = model.to(device=self.device, dtype=dtype)
        self.dtype = dtype
        for e in model.elements:
            if e not in descriptor.elements:
                raise TrainingError(
                    f"model element {e} not in the descriptor's {descriptor.elements}"
                )

    @property
    def cutoff(self) -> float:
        """Neighbour-list cutoff (Å)."""
        return float(self.descriptor.r_cut)

    def neighbors(self, batch: StructureBatch) -> Neighbors:
        """Neighbour list of ``batch`` (computed outside the differentiable graph)."""
        return neighbor_list(batch, self.cutoff)

    def _compute(self, batch: StructureBatch, nb: Neighbors, derivatives: bool, backend: str):  # noqa: ANN202
        """Descriptor results per element (values, and per-pair derivatives if asked)."""
        if isinstance(self.descriptor, ACSF):
            return self.descriptor.compute(
                batch, derivatives=derivatives, dtype=self.dtype, neighbors=nb, backend=backend
            )
        return self.descriptor.compute(
            batch, derivatives=derivatives, neighbors=nb, dtype=self.dtype
        )

    def energy(
        self,
        batch: StructureBatch,
        positions: torch.Tensor | None = None,
        neighbors: Neighbors | None = None,
    ) -> torch.Tensor:
        """Energies (S,) eV; differentiable with respect to ``positions`` (N, 3) Å."""
        nb = neighbors if neighbors is not None else self.neighbors(batch)
        sidx = torch.from_numpy(batch.structure_index)
        if positions is None:
            res = self._compute(batch, nb, False, "auto")
            values = {e: r.values for e, r in res.items() if r.values.shape[0]}
            index = {e: r.atom_index for e, r in res.items()}
            return self.model(values, index, sidx, batch.n_structures)
        if isinstance(self.descriptor, ACSF):
            res = self.descriptor.compute(
                batch, dtype=self.dtype, neighbors=nb, positions=positions, backend="torch"
            )
            values = {e: r.values for e, r in res.items() if r.values.shape[0]}
            index = {e: r.atom_index for e, r in res.items()}
            return self.model(values, index, sidx, batch.n_structures)
        # NeighborSum: pair vectors from positions inside the graph, then its forward
        pos = positions.to(self.dtype)
        pf, ps = torch.from_numpy(nb.pair_first), torch.from_numpy(nb.pair_second)
        cells = torch.from_numpy(batch.cells).to(self.dtype)[sidx[pf]]  # (P, 3, 3)
        shift = torch.einsum("pa,pab->pb", torch.from_numpy(nb.shifts).to(self.dtype), cells)
        vec = pos[ps] - pos[pf] + shift  # (P, 3)
        keep = torch.nonzero(vec.detach().norm(dim=1) < self.cutoff).squeeze(1)
        species = torch.from_numpy(self.descriptor._species(batch))  # (N,)
        g = self.descriptor(species, pf[keep], ps[keep], vec[keep])  # (N, F)
        index = {
            e: torch.nonzero(species == k).squeeze(1)
            for k, e in enumerate(self.descriptor.elements)
        }
        values = {e: g[i] for e, i in index.items() if i.numel()}
        return self.model(values, index, sidx, batch.n_structures)

    def forward(
        self, batch: StructureBatch, positions: torch.Tensor, neighbors: Neighbors | None = None
    ) -> torch.Tensor:
        """Energies (S,) from ``positions`` (N, 3): same as :meth:`energy`."""
        return self.energy(batch, positions, neighbors)

    def _compiled(self, backend: str) -> bool:
        """Whether :meth:`predict` takes the compiled route (ACSF with the numba backend)."""
        return isinstance(self.descriptor, ACSF) and ACSF._resolve_backend(backend, None) == "numba"

    def _acsf_forces(self):  # noqa: ANN202
        """The compiled ACSF route (made once; it caches per-neighbour-list bookkeeping)."""
        engine = self.__dict__.get("_engine")
        if engine is None:
            from dparallel.deploy.acsf_forces import ACSFForces

            assert isinstance(self.descriptor, ACSF)
            engine = ACSFForces(self.descriptor, self.model, self.dtype)
            self.__dict__["_engine"] = engine
        return engine

    def _predict_torch(
        self, batch: StructureBatch, nb: Neighbors, forces: bool, stress: bool, backend: str
    ) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
        """:meth:`predict` through torch ops: outputs and the virial (S, 3, 3) if ``stress``."""
        need = forces or stress
        dev = self.device
        res = self._compute(batch, nb, need, backend)
        if dev.type != "cpu":
            res = features_to(res, dev)
        values = {}
        for e, r in res.items():
            if r.values.shape[0]:
                values[e] = r.values.detach().requires_grad_(need)
        sidx = torch.from_numpy(batch.structure_index).to(dev)
        with torch.enable_grad():
            atomic = self.model.atomic_energies(values)
            energy = torch.zeros(batch.n_structures, dtype=self.dtype, device=dev)
            per_atom = torch.zeros(batch.n_atoms, dtype=self.dtype, device=dev)
            for e, ei in atomic.items():
                per_atom = per_atom.index_put((res[e].atom_index,), ei.detach())
                energy = energy.index_add(0, sidx.index_select(0, res[e].atom_index), ei)
            out: dict[str, np.ndarray] = {
                "energy": energy.detach().cpu().numpy(),
                "energies": per_atom.cpu().numpy(),
            }
            if not need:
                return out, None
            keys = list(values)
            grads = torch.autograd.grad(energy.sum(), [values[k] for k in keys]) if keys else ()
        dE_dG = dict(zip(keys, grads, strict=True))
        sub = {e: res[e] for e in keys}
        if forces:
            out["forces"] = forces_from_derivatives(dE_dG, sub, batch.n_atoms).cpu().numpy()
        if not stress:
            return out, None
        virial = virial_from_derivatives(dE_dG, sub, sidx, batch.n_structures)
        return out, virial.cpu().numpy()

    def predict(
        self,
        batch: StructureBatch,
        *,
        forces: bool = True,
        stress: bool = False,
        neighbors: Neighbors | None = None,
        backend: str = "auto",
    ) -> dict[str, np.ndarray]:
        """Energy (S,) eV, forces (N, 3) eV/Å, stress (S, 3, 3) eV/Å³ (periodic cells).

        Stress is σ = (1/V) ∂E/∂ε = −W/V with the virial W from the pair terms; it is NaN
        for structures without a 3-D periodic cell. Also ``energies`` (N,) per atom.
        ``neighbors`` may hold pairs beyond the cutoff (a list with a skin): they are ignored.
        ``backend`` picks the ACSF backend (``"auto"``, ``"numba"``, ``"torch"``).
        """
        nb = neighbors if neighbors is not None else self.neighbors(batch)
        if self._compiled(backend) and self.device.type == "cpu":
            out, w = self._acsf_forces()(batch, nb, forces, stress)
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

    def to_file(self) -> dict[str, Any]:
        """Everything :func:`load_deployed` needs (tensors and plain data only)."""
        return {
            "format": "dparallel-deployed",
            "version": 2,
            "descriptor_kind": _kind(self.descriptor),
            "descriptor": json.dumps(self.descriptor.to_dict()),
            "model_config": json.dumps(self.model.config()),
            "state_dict": self.model.state_dict(),
            "dtype": str(self.dtype).removeprefix("torch."),
        }


def load_deployed(
    path: str | os.PathLike[str],
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
) -> DeployedModel:
    """Load ``deployed.pt`` (or MODEL_DIR containing it), evaluating on ``device``."""
    path = Path(path)
    if path.is_dir():
        path = path / DEPLOYED
    if not path.is_file():
        raise TrainingError(
            f"no deployable model at {path}; run `dparallel export {path.parent}` first"
        )
    data = load_torch_file(path, "deployed model")
    if data.get("format") != "dparallel-deployed":
        raise TrainingError(f"{path} is not a dparallel deployed model")
    descriptor = descriptor_from_dict(
        data.get("descriptor_kind", "acsf"), json.loads(data["descriptor"])
    )
    model = HDNNP(**json.loads(data["model_config"]))
    dt = dtype or getattr(torch, data.get("dtype", "float64"))
    model = model.to(dt)
    model.load_state_dict(data["state_dict"])
    model.eval()
    return DeployedModel(descriptor, model, dt, device)


class _AtomicEnergy(nn.Module):
    """One element's descriptor → atomic-energy map (scaling, MLP, scale, reference)."""

    def __init__(self, model: HDNNP, element: str) -> None:
        super().__init__()
        self.model = model
        self.element = element

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        return self.model.atomic_energies({self.element: values})[self.element]


def export_atomic_energies(model: HDNNP, model_dir: Path) -> list[str]:
    """``torch.export`` each element's network to ``atomic_energy_<E>.pt2``.

    Input: (n, F_e) unscaled descriptors with dynamic n ≥ 0; output: (n,) atomic energies
    (eV, reference energy included). Differentiable after ``torch.export.load``, so forces
    follow from dE/dG and the descriptor derivatives.
    """
    from torch.export import Dim

    files = []
    for e in model.elements:
        example = torch.zeros(3, model.n_features[e], dtype=model.ref_energy.dtype)
        program = torch.export.export(
            _AtomicEnergy(model, e), (example,), dynamic_shapes=({0: Dim(f"n_{e}", min=0)},)
        )
        name = f"atomic_energy_{e}.pt2"
        # called at once, inside this iteration: the late binding B023 warns of cannot bite
        write_with(
            model_dir / name,
            lambda tmp: torch.export.save(program, tmp),  # noqa: B023
            suffix=".pt2",
        )
        files.append(name)
    return files


def load_atomic_energies(model_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Element → callable (n, F_e) → (n,) from the ``atomic_energy_<E>.pt2`` files."""
    out = {}
    for path in sorted(Path(model_dir).glob("atomic_energy_*.pt2")):
        element = path.stem.removeprefix("atomic_energy_")
        out[element] = load_exported_program(path).module()
    if not out:
        raise TrainingError(f"no atomic_energy_*.pt2 in {model_dir}; run `dparallel export`")
    return out


def export_model(
    model_dir: str | os.PathLike[str],
    dtype: torch.dtype = torch.float64,
    artifacts: bool = True,
    aoti: bool = False,
) -> dict[str, Any]:
    """Write the deployable files of ``MODEL_DIR/model.pt``; returns the report.

    Writes ``deployed.pt`` and ``atomic_energy_<E>.pt2``; with ``artifacts`` also the
    plain-torch whole-model files (``potential.pt2``, ``potential.ts``; with ``aoti``
    ``potential_aoti.pt2``). The report (also ``MODEL_DIR/export.json``) lists the files
    and, per route, ``ok`` with the largest deviation from ``deployed.pt`` (the analytic
    route ``Calculator`` uses) on probe structures made of the model's elements,
    ``failed`` with the reason, or ``skipped``.
    """
    from dparallel.deploy import PotentialModule
    from dparallel.deploy.artifacts import ARTIFACTS, RouteReport, write_artifacts
    from dparallel.nn import load_model

    model_dir = Path(model_dir)
    model, data = load_model(model_dir)
    kind = str(data.get("descriptor_kind"))
    if not data.get("descriptor"):
        raise TrainingError(f"{model_dir}/model.pt holds no descriptor spec; retrain it")
    descriptor = descriptor_from_dict(kind, data["descriptor"])
    deployed = DeployedModel(descriptor, model, dtype)
    for old in model_dir.glob("atomic_energy_*.pt2"):  # an older model's, other elements too
        remove_file(old)
    write_with(model_dir / DEPLOYED, lambda tmp: torch.save(deployed.to_file(), tmp))
    report: dict[str, Any] = {
        "descriptor": kind,
        "elements": list(model.elements),
        "cutoff": deployed.cutoff,
        "dtype": str(dtype).removeprefix("torch."),
        "files": [DEPLOYED],
    }
    try:
        report["files"] += export_atomic_energies(deployed.model, model_dir)
    except Exception as exc:  # noqa: BLE001 - the other files still work
        from dparallel.deploy.artifacts import reason

        log.warning("torch.export of the element networks failed: %s", reason(exc))
        report["atomic_energy_export"] = reason(exc)
    for name in ARTIFACTS.values():  # never leave a stale artifact of an older model
        (model_dir / name).unlink(missing_ok=True)
    if artifacts:
        from dparallel.deploy.probes import probe_structures

        potential = PotentialModule(descriptor, deployed.model, dtype)
        probes = probe_structures(potential.elements, potential.cutoff, dtype)
        report["probes"] = [p.name for p in probes]
        routes = write_artifacts(
            potential, model_dir, probes, aoti=aoti, reference=deployed.outputs
        )
    else:
        routes = {n: RouteReport("skipped", reason="not requested") for n in ARTIFACTS}
    report["routes"] = {name: r.to_dict() for name, r in routes.items()}
    report["files"] += [r.file for r in routes.values() if r.file]
    write_file(model_dir / EXPORT_REPORT, strict_json(report, indent=1), durable=True)
    return report


def describe_report(report: dict[str, Any]) -> list[str]:
    """Human-readable lines of an export report (what the CLI and workflows print)."""
    lines = [
        f"model: {report['descriptor']} descriptor, elements {', '.join(report['elements'])}, "
        f"cutoff {report['cutoff']:g} Å, {report['dtype']}",
        f"files: {', '.join(report['files'])}",
    ]
    probes = ", ".join(report.get("probes", []))
    for name, r in report.get("routes", {}).items():
        if r["status"] == "ok":
            d = r["max_abs_diff"]
            lines.append(
                f"{name}: ok -> {r['file']} (checked on {probes}: max |dE| {d['energy']:.1e} eV, "
                f"|dF| {d['forces']:.1e} eV/Å vs deployed.pt)"
            )
        else:
            lines.append(f"{name}: {r['status']}: {r.get('reason', '')}")
        if r.get("note"):
            lines.append(f"  ({r['note']})")
    return lines
