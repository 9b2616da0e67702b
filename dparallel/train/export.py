"""Deployable model: energy, forces and stress from positions, numbers, cell and pbc.

:class:`DeployedModel` recomputes the descriptors from the positions (``ACSF.compute``)
and evaluates the trained :class:`HDNNP`. Two force routes, tested against each other and
against finite differences:

* ``predict`` (default, fast): analytic ∂G/∂r_ij from ACSF (numba or torch backend),
  dE/dG by autograd, F = −Σ (∂E/∂G)(∂G/∂r) and the virial from the same pair terms;
* ``energy(batch, positions)``: positions → pair vectors inside the torch graph, so
  F = −∂E/∂positions by autograd (torch backend, differentiable twice).

:func:`export_model` writes ``MODEL_DIR/deployed.pt`` (weights + descriptor spec, loaded
with ``torch.load(weights_only=True)``), ``atomic_energy_<E>.pt2`` (each element's
network, ``torch.export`` with a dynamic number of atoms) and reports whether
``torch.export`` and TorchScript could capture the whole positions → energy module
(docs/training.md explains why they cannot today).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from dparallel.descriptors import ACSF, forces_from_derivatives, virial_from_derivatives
from dparallel.errors import TrainingError
from dparallel.neighbors import Neighbors, neighbor_list
from dparallel.train.files import load_exported_program, load_torch_file
from dparallel.train.model import HDNNP
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    import os

__all__ = [
    "DEPLOYED",
    "DeployedModel",
    "export_atomic_energies",
    "export_model",
    "load_atomic_energies",
    "load_deployed",
]

log = logging.getLogger(__name__)

#: File name of the deployable model inside MODEL_DIR.
DEPLOYED = "deployed.pt"
EXPORT_REPORT = "export.json"


class DeployedModel(nn.Module):
    """ACSF descriptors + HDNNP: a self-contained potential (float64 by default)."""

    def __init__(self, acsf: ACSF, model: HDNNP, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.acsf = acsf
        self.model = model.to(dtype)
        self.dtype = dtype
        for e in model.elements:
            if e not in acsf.elements:
                raise TrainingError(f"model element {e} not in the descriptor's {acsf.elements}")

    @property
    def cutoff(self) -> float:
        """Neighbour-list cutoff (Å)."""
        return self.acsf.r_cut

    def neighbors(self, batch: StructureBatch) -> Neighbors:
        """Neighbour list of ``batch`` (computed outside the differentiable graph)."""
        return neighbor_list(batch, self.cutoff)

    def energy(
        self,
        batch: StructureBatch,
        positions: torch.Tensor | None = None,
        neighbors: Neighbors | None = None,
    ) -> torch.Tensor:
        """Energies (S,) eV; differentiable with respect to ``positions`` (N, 3) Å."""
        res = self.acsf.compute(
            batch,
            dtype=self.dtype,
            neighbors=neighbors if neighbors is not None else self.neighbors(batch),
            positions=positions,
            backend="torch" if positions is not None else "auto",
        )
        values = {e: r.values for e, r in res.items() if r.values.shape[0]}
        index = {e: r.atom_index for e, r in res.items()}
        sidx = torch.from_numpy(batch.structure_index)
        return self.model(values, index, sidx, batch.n_structures)

    def forward(
        self, batch: StructureBatch, positions: torch.Tensor, neighbors: Neighbors | None = None
    ) -> torch.Tensor:
        """Energies (S,) from ``positions`` (N, 3): same as :meth:`energy`."""
        return self.energy(batch, positions, neighbors)

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
        """
        nb = neighbors if neighbors is not None else self.neighbors(batch)
        need = forces or stress
        res = self.acsf.compute(
            batch, derivatives=need, dtype=self.dtype, neighbors=nb, backend=backend
        )
        values = {}
        for e, r in res.items():
            if r.values.shape[0]:
                values[e] = r.values.detach().requires_grad_(need)
        sidx = torch.from_numpy(batch.structure_index)
        with torch.enable_grad():
            atomic = self.model.atomic_energies(values)
            energy = torch.zeros(batch.n_structures, dtype=self.dtype)
            per_atom = torch.zeros(batch.n_atoms, dtype=self.dtype)
            for e, ei in atomic.items():
                per_atom = per_atom.index_put((res[e].atom_index,), ei.detach())
                energy = energy.index_add(0, sidx.index_select(0, res[e].atom_index), ei)
            out: dict[str, np.ndarray] = {
                "energy": energy.detach().numpy(),
                "energies": per_atom.numpy(),
            }
            if not need:
                return out
            keys = list(values)
            grads = torch.autograd.grad(energy.sum(), [values[k] for k in keys]) if keys else ()
        dE_dG = dict(zip(keys, grads, strict=True))
        sub = {e: res[e] for e in keys}
        if forces:
            out["forces"] = forces_from_derivatives(dE_dG, sub, batch.n_atoms).numpy()
        if stress:
            w = virial_from_derivatives(dE_dG, sub, sidx, batch.n_structures).numpy()
            vol = np.abs(np.linalg.det(batch.cells))  # (S,)
            periodic = batch.pbc.all(1) & (vol > 1e-10)
            s = np.full((batch.n_structures, 3, 3), np.nan)
            s[periodic] = -w[periodic] / vol[periodic, None, None]
            out["stress"] = s
        return out

    def to_file(self) -> dict[str, Any]:
        """Everything :func:`load_deployed` needs (tensors and plain data only)."""
        return {
            "format": "dparallel-deployed",
            "version": 1,
            "descriptor": json.dumps(self.acsf.to_dict()),
            "model_config": json.dumps(self.model.config()),
            "state_dict": self.model.state_dict(),
            "dtype": str(self.dtype).removeprefix("torch."),
        }


def load_deployed(path: str | os.PathLike[str], dtype: torch.dtype | None = None) -> DeployedModel:
    """Load ``deployed.pt`` (or MODEL_DIR containing it)."""
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
    acsf = ACSF.from_dict(json.loads(data["descriptor"]))
    model = HDNNP(**json.loads(data["model_config"]))
    dt = dtype or getattr(torch, data.get("dtype", "float64"))
    model = model.to(dt)
    model.load_state_dict(data["state_dict"])
    model.eval()
    return DeployedModel(acsf, model, dt)


def _reason(exc: BaseException) -> str:
    """First non-empty line of an exception, prefixed by its type."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {(lines[0] if lines else '')[:300]}"


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
        torch.export.save(program, model_dir / name)
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


def _try_torch_export(module: DeployedModel) -> str:
    """Attempt torch.export on a positions → energy wrapper; returns 'ok' or the reason."""
    from ase.build import bulk

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True)
    batch = StructureBatch.from_ase([atoms])
    nb = module.neighbors(batch)

    class _Wrap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, positions: torch.Tensor) -> torch.Tensor:
            return self.inner.energy(batch, positions, nb)

    import contextlib
    import io
    import logging

    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)  # a failed export logs the whole traced graph
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            torch.export.export(_Wrap(), (torch.from_numpy(batch.positions.copy()),), strict=False)
    except Exception as exc:  # noqa: BLE001 - recorded, not raised
        return _reason(exc)
    finally:
        logging.disable(previous)
    return "ok (fixed shapes only; not saved)"


def export_model(
    model_dir: str | os.PathLike[str], dtype: torch.dtype = torch.float64, try_export: bool = True
) -> dict[str, Any]:
    """Write ``MODEL_DIR/deployed.pt`` from ``MODEL_DIR/model.pt``; returns a report.

    The report (also ``MODEL_DIR/export.json``) lists the files written and what
    ``torch.export`` / TorchScript said about the module.
    """
    from dparallel.train.loop import load_model

    model_dir = Path(model_dir)
    model, data = load_model(model_dir)
    if data.get("descriptor_kind") != "acsf" or not data.get("descriptor"):
        raise TrainingError(
            f"{model_dir}: only ACSF models can be exported (descriptors are recomputed "
            f"from positions); this one uses {data.get('descriptor_kind')!r}"
        )
    deployed = DeployedModel(ACSF.from_dict(data["descriptor"]), model, dtype)
    path = model_dir / DEPLOYED
    tmp = path.with_name(path.name + ".tmp")
    torch.save(deployed.to_file(), tmp)
    tmp.replace(path)
    report: dict[str, Any] = {"files": [DEPLOYED], "format": "state_dict + descriptor spec"}
    try:
        report["files"] += export_atomic_energies(deployed.model, model_dir)
    except Exception as exc:  # noqa: BLE001 - the state_dict route still works
        log.warning("torch.export of the element networks failed: %s", _reason(exc))
        report["atomic_energy_export"] = _reason(exc)
    if try_export:
        report["torch_export"] = _try_torch_export(deployed)
        try:
            torch.jit.script(deployed.model)  # the MLP part alone scripts; ACSF does not
            report["torchscript"] = "HDNNP scripts; ACSF.compute (numpy batch input) does not"
        except Exception as exc:  # noqa: BLE001
            report["torchscript"] = _reason(exc)
    (model_dir / EXPORT_REPORT).write_text(json.dumps(report, indent=1))
    return report
