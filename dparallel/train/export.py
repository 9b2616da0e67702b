"""``dparallel export``: write the deployable files of a trained model and a report.

:func:`export_model` reads ``MODEL_DIR/model.pt`` and runs the steps of
:data:`EXPORT_STEPS`: ``deployed.pt`` (what ``dparallel.ase.Calculator`` and ``dparallel
evaluate`` load), ``lammps.model`` (``pair_style dparallel``), ``atomic_energy_<E>.pt2`` and
the plain-torch files of :mod:`dparallel.deploy.artifacts` (docs/training.md,
"Export and deployment"). ``export.json`` says for every route whether it worked (and how closely it
reproduces ``deployed.pt``) or why not. The descriptor is rebuilt through the descriptor
registry, so every registered type exports.

``export.json`` is also the export's completion record: it is removed before the first
step and written last, with the SHA-256 of the ``model.pt`` it was made from, so a killed
export leaves none and :func:`export_needed` (what ``dparallel run`` asks) says it must
run again. Files are replaced, never removed first: each is written under a temporary
name beside its target and renamed over it (:mod:`dparallel._files`); a file of an older
model that this export does not write again is removed after the new ones are in place.
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dparallel._files import remove_file, strict_json, write_file
from dparallel.deploy import DEPLOYED, DeployedModel, export_atomic_energies
from dparallel.deploy.artifacts import ARTIFACTS, RouteReport, reason, write_artifacts
from dparallel.deploy.deployed import model_sha256, still_training
from dparallel.descriptors.registry import recorded_kind
from dparallel.errors import DescriptorError, TrainingError
from dparallel.nn import file_not_model_dir, load_model

if TYPE_CHECKING:
    import os
    from collections.abc import Callable

log = logging.getLogger(__name__)

EXPORT_REPORT = "export.json"


@dataclass
class ExportJob:
    """One :func:`export_model` call: its model, folder, options and the report steps add to."""

    deployed: DeployedModel
    #: the model as trained, in float64 (``deployed`` itself unless ``--float32``): what
    #: ``deployed.pt`` and ``lammps.model`` keep, so a float32 export rounds no weight there
    exact: DeployedModel
    model_dir: Path
    artifacts: bool
    aoti: bool
    report: dict[str, Any]


def _write_deployed(job: ExportJob) -> None:
    """``deployed.pt``: what the calculator and ``evaluate`` load (the exact weights; the
    export's dtype recorded as the default they are loaded in)."""
    job.exact.save(
        job.model_dir / DEPLOYED, trained=job.model_dir / "model.pt", dtype=job.deployed.dtype
    )
    job.report["files"].append(DEPLOYED)


def _write_lammps_model(job: ExportJob) -> None:
    """``lammps.model`` for ``pair_style dparallel``; for a model it cannot run, the reason."""
    from dparallel.deploy.lammps_model import write_lammps_model

    why = write_lammps_model(job.exact.descriptor, job.exact.model, job.model_dir)
    job.report["files"].append("lammps.model")
    if why is not None:
        job.report["lammps"] = f"unsupported: {why}"


def _write_atomic_energies(job: ExportJob) -> None:
    """``atomic_energy_<E>.pt2``; a failure is reported, the other files still work."""
    written: list[str] = []
    try:
        written = export_atomic_energies(job.deployed.model, job.model_dir)
    except Exception as exc:  # noqa: BLE001 - the other files still work
        log.warning("torch.export of the element networks failed: %s", reason(exc))
        job.report["atomic_energy_export"] = reason(exc)
    job.report["files"] += written
    for old in job.model_dir.glob("atomic_energy_*.pt2"):  # an older model's, other elements
        if old.name not in written:
            remove_file(old)


def _write_plain_torch(job: ExportJob) -> None:
    """``potential.pt2``/``.ts`` (``potential_aoti.pt2``), each checked against deployed.pt."""
    from dparallel.deploy import PotentialModule
    from dparallel.deploy.probes import probe_structures

    if not job.artifacts:
        routes = {n: RouteReport("skipped", reason="not requested") for n in ARTIFACTS}
    else:
        deployed = job.deployed
        try:
            potential = PotentialModule(deployed.descriptor, deployed.model, deployed.dtype)
        except DescriptorError as exc:  # a type without a graph form
            routes = {n: RouteReport("failed", reason=str(exc)) for n in ARTIFACTS}
        else:
            probes = probe_structures(potential.elements, potential.cutoff, deployed.dtype)
            job.report["probes"] = [p.name for p in probes]
            float64 = None if job.exact is deployed else job.exact.outputs  # --float32
            routes = write_artifacts(
                potential, job.model_dir, probes,
                aoti=job.aoti, reference=deployed.outputs, float64=float64,
            )  # fmt: skip
    job.report["routes"] = {name: r.to_dict() for name, r in routes.items()}
    job.report["files"] += [r.file for r in routes.values() if r.file]
    for name, file in ARTIFACTS.items():  # never leave a stale artifact of an older model
        if not routes[name].file:
            remove_file(job.model_dir / file)


#: The steps of :func:`export_model`, in order; each writes its files into
#: ``job.model_dir`` and records them (and any failure) in ``job.report``.
EXPORT_STEPS: list[Callable[[ExportJob], None]] = [
    _write_deployed,
    _write_lammps_model,
    _write_atomic_energies,
    _write_plain_torch,
]


@torch.inference_mode(False)  # it differentiates: also in a caller's inference_mode block
@torch.enable_grad()
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
    ``failed`` with the reason, or ``skipped``; for a dtype other than float64 also the
    deviation from the trained float64 model (``max_abs_diff_float64``).
    """
    model_dir = Path(model_dir)
    if model_dir.exists() and not model_dir.is_dir():  # its model.pt, a structure file
        raise TrainingError(file_not_model_dir(model_dir))
    if not (model_dir / "model.pt").is_file() and (why := still_training(model_dir, "model.pt")):
        raise TrainingError(why)
    # the completion record goes first: an export killed from here on leaves none
    remove_file(model_dir / EXPORT_REPORT)
    model, data = load_model(model_dir)
    if not data.get("descriptor"):
        raise TrainingError(f"{model_dir}/model.pt holds no descriptor spec; retrain it")
    try:
        kind = recorded_kind(data)
        descriptor = kind.from_dict(data["descriptor"])
    except DescriptorError as exc:
        raise TrainingError(f"{model_dir}/model.pt: {exc}") from None
    exact = DeployedModel(descriptor, model, torch.float64)
    if dtype == torch.float64:
        deployed = exact
    else:  # its own copy: converting a module changes it in place
        deployed = DeployedModel(descriptor, copy.deepcopy(model), dtype)
    report: dict[str, Any] = {
        "descriptor": kind.name,
        "elements": list(model.elements),
        "cutoff": deployed.cutoff,
        "dtype": str(dtype).removeprefix("torch."),
        "model_sha256": model_sha256(model_dir / "model.pt"),
        "files": [],
    }
    job = ExportJob(deployed, exact, model_dir, artifacts, aoti, report)
    for step in EXPORT_STEPS:
        step(job)
    # last: every file it lists is in place (and on disk) before it
    write_file(model_dir / EXPORT_REPORT, strict_json(report, indent=1), durable=True)
    return report


def export_n2p2_potential(
    directory: str | os.PathLike[str], units: str | None = None
) -> dict[str, Any]:
    """``dparallel export`` of an n2p2 potential directory: its ``lammps.model``.

    ``dparallel.ase.Calculator`` and ``dparallel evaluate`` read the n2p2 files themselves;
    ``pair_style dparallel`` reads ``DIR/lammps.model`` (Å and eV). ``units``: those of the
    n2p2 files (``None``: what ``input.nn`` declares, else Å and eV; see
    :func:`dparallel.n2p2.declared_units.potential_units`). Returns the report.
    """
    from dparallel.deploy.lammps_model import write_lammps_model
    from dparallel.n2p2 import load_potential
    from dparallel.n2p2.declared_units import potential_units

    d = Path(directory)
    chosen = potential_units(d, units, "ase")
    acsf, model = load_potential(d, units=chosen)
    why = write_lammps_model(acsf, model, d)
    report: dict[str, Any] = {
        "descriptor": "acsf (n2p2 potential)",
        "elements": list(acsf.elements),
        "cutoff": float(acsf.r_cut),
        "units": chosen,
        "files": ["lammps.model"],
    }
    if why is not None:
        report["lammps"] = f"unsupported: {why}"
    return report


def export_needed(model_dir: str | os.PathLike[str]) -> str | None:
    """Why ``MODEL_DIR`` needs :func:`export_model` (``None``: its export is complete and of
    its current ``model.pt``).

    Complete means ``export.json`` (written last) is there and readable, every file it lists
    exists, and it was made from this ``model.pt``: the same SHA-256 (a record without one,
    of an older dparallel: not older than ``model.pt``).
    """
    model_dir = Path(model_dir)
    record, model = model_dir / EXPORT_REPORT, model_dir / "model.pt"
    try:
        report = json.loads(record.read_text())
        files = [str(f) for f in report["files"]]
    except FileNotFoundError:
        return f"no {EXPORT_REPORT}: never exported, or an export did not finish"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{record} is unreadable ({type(exc).__name__}: {exc})"
    missing = [f for f in files if not (model_dir / f).is_file()]
    if missing:
        return f"{EXPORT_REPORT} lists {', '.join(missing)}, not in {model_dir}"
    made_from = report.get("model_sha256")
    if not model.is_file():
        return f"no model.pt in {model_dir}"
    if made_from is not None:
        if made_from != model_sha256(model):
            return f"model.pt changed since the export ({EXPORT_REPORT} has another SHA-256)"
    elif record.stat().st_mtime < model.stat().st_mtime:
        return f"model.pt is newer than {EXPORT_REPORT}"
    return None


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
            if d64 := r.get("max_abs_diff_float64"):
                lines.append(
                    f"  vs the float64 model.pt: max |dE| {d64['energy']:.1e} eV, "
                    f"|dF| {d64['forces']:.1e} eV/Å"
                )
        else:
            lines.append(f"{name}: {r['status']}: {r.get('reason', '')}")
        if r.get("note"):
            lines.append(f"  ({r['note']})")
    return lines
