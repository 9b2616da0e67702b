"""The training loop: prepare (splits, reference energies, scaling), epochs, checkpoints.

``train(store, model_dir, spec)`` is the library entry point behind ``dparallel train``.
Everything random derives from ``spec.seed`` and the epoch number, so a run resumed from
its per-epoch checkpoint follows the same trajectory as an uninterrupted one.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from dparallel.descriptors import forces_from_derivatives
from dparallel.errors import TrainingError
from dparallel.store import Store, open_store
from dparallel.train.data import Batch, PartitionReader, SplitIndex, build_split_index
from dparallel.train.data import iterate_batches as _iterate
from dparallel.train.files import load_torch_file, save_torch_file
from dparallel.train.kalman import KalmanFilter, kalman_step, make_kalman
from dparallel.train.metric_units import with_units
from dparallel.train.model import HDNNP, scaling_parameters
from dparallel.train.spec import TrainingSpec

if TYPE_CHECKING:
    from dparallel.types import StructureBatch

__all__ = ["Metrics", "TrainResult", "evaluate_split", "load_model", "predict_batch", "train"]

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"
BEST = "best.pt"
MODEL = "model.pt"
METRICS_CSV = "metrics.csv"
METRICS_JSON = "metrics.json"
SPEC_JSON = "spec.json"
#: What a checkpoint must hold to resume from it.
_CHECKPOINT_KEYS = frozenset(
    {
        "epoch",
        "model",
        "optimizer",
        "rng",
        "best_val",
        "best_epoch",
        "bad_epochs",
        "history",
        "spec",
    }
)
#: Training keys a resumed run may change.
_RESUMABLE_KEYS = frozenset({"epochs", "allow_incomplete"})
_CACHE_BYTES = int(os.environ.get("DPARALLEL_TRAIN_CACHE_MB", "2048")) * 2**20


# -------------------------------------------------------------------- metrics
@dataclass
class Metrics:
    """Running sums for energy-per-atom and force-component errors (eV, eV/Å)."""

    n_e: int = 0
    se_e: float = 0.0
    ae_e: float = 0.0
    n_f: int = 0
    se_f: float = 0.0
    ae_f: float = 0.0
    loss_sum: float = 0.0
    n_batches: int = 0
    parity: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def add(
        self,
        e_pred: torch.Tensor,
        e_ref: torch.Tensor,
        n_atoms: torch.Tensor,
        f_pred: torch.Tensor | None,
        f_ref: torch.Tensor | None,
        loss: float | None = None,
        keep: bool = False,
    ) -> None:
        """Accumulate one batch (energies (S,), atom counts (S,), forces (N, 3))."""
        with torch.no_grad():
            de = (e_pred - e_ref) / n_atoms
            ok = torch.isfinite(de)
            self.n_e += int(ok.sum())
            self.se_e += float((de[ok] ** 2).sum())
            self.ae_e += float(de[ok].abs().sum())
            if keep:
                self.parity.setdefault("e_ref", []).append((e_ref / n_atoms)[ok].numpy())
                self.parity.setdefault("e_pred", []).append((e_pred / n_atoms)[ok].numpy())
            if f_pred is not None and f_ref is not None:
                df = f_pred - f_ref
                okf = torch.isfinite(df)
                self.n_f += int(okf.sum())
                self.se_f += float((df[okf] ** 2).sum())
                self.ae_f += float(df[okf].abs().sum())
                if keep:
                    self.parity.setdefault("f_ref", []).append(f_ref[okf].numpy())
                    self.parity.setdefault("f_pred", []).append(f_pred[okf].numpy())
            if loss is not None:
                self.loss_sum += loss
                self.n_batches += 1

    def summary(self) -> dict[str, float]:
        """energy_rmse/mae (eV/atom), force_rmse/mae (eV/Å), loss (NaN when not measured)."""
        nan = float("nan")
        return {
            "loss": self.loss_sum / self.n_batches if self.n_batches else nan,
            "energy_rmse": math.sqrt(self.se_e / self.n_e) if self.n_e else nan,
            "energy_mae": self.ae_e / self.n_e if self.n_e else nan,
            "force_rmse": math.sqrt(self.se_f / self.n_f) if self.n_f else nan,
            "force_mae": self.ae_f / self.n_f if self.n_f else nan,
        }

    def parity_arrays(self) -> dict[str, np.ndarray]:
        """Concatenated reference/predicted arrays kept with ``keep=True``."""
        return {k: np.concatenate(v) for k, v in self.parity.items()}


# ------------------------------------------------------------------ predictions
def predict_batch(
    model: HDNNP, batch: Batch, forces: bool, create_graph: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Energies (S,) and, if ``forces``, forces (N, 3) from stored descriptors and derivatives.

    Forces use dE/dG by autograd and the stored ∂G/∂r (``forces_from_derivatives``);
    ``create_graph=True`` keeps the graph so a loss can be back-propagated (training);
    without it and without forces, the energies are computed under ``no_grad``.
    """
    values = {}
    for e, res in batch.features.items():
        v = res.values
        values[e] = v.detach().requires_grad_(True) if forces else v
    atom_index = {e: r.atom_index for e, r in batch.features.items()}
    with torch.enable_grad() if forces or create_graph else torch.no_grad():
        energy = model(values, atom_index, batch.structure_index, batch.n_structures)
        if not forces:
            return energy, None
        keys = list(values)
        grads = torch.autograd.grad(
            energy.sum(), [values[k] for k in keys], create_graph=create_graph, allow_unused=True
        )
        dE_dG = {
            k: (g if g is not None else torch.zeros_like(values[k]))
            for k, g in zip(keys, grads, strict=True)
        }
        f = forces_from_derivatives(dE_dG, batch.features, batch.n_atoms)
    return energy, f


def _loss(
    energy: torch.Tensor, f: torch.Tensor | None, batch: Batch, force_weight: float
) -> torch.Tensor:
    """MSE of energy per atom + force_weight · MSE of force components (NaN labels masked)."""
    de = (energy - batch.energy) / batch.atom_counts
    ok = torch.isfinite(batch.energy)
    loss = (de[ok] ** 2).mean() if bool(ok.any()) else energy.sum() * 0.0
    if f is not None and force_weight > 0:
        okf = torch.isfinite(batch.forces)
        if bool(okf.any()):
            loss = loss + force_weight * ((f - batch.forces)[okf] ** 2).mean()
    return loss


# -------------------------------------------------------------------- prepare
@dataclass
class _Prepared:
    store: Store
    descriptor: str
    elements: list[str]
    n_features: dict[str, int]
    index: SplitIndex
    forces: bool
    ref_energy: np.ndarray
    energy_scale: float
    scaling: dict[str, tuple[np.ndarray, np.ndarray, float]]
    statistics: dict[str, dict[str, list]]
    descriptor_spec: dict[str, Any] | None


def _feature_config(store: Store, descriptor: str) -> tuple[dict[str, Any], bool]:
    cfg = store.attrs.get("config", {}).get("features")
    if not cfg or not cfg.get(descriptor):
        raise TrainingError(
            f"{store.path} has no {descriptor!r} features (config.features is "
            f"{'missing' if not cfg else 'without ' + descriptor}); featurize the store first"
        )
    return cfg[descriptor], bool(cfg.get("derivatives", False))


def _elements_of(desc: Mapping[str, Any], descriptor: str) -> list[str]:
    if "elements" in desc:
        return [str(e) for e in desc["elements"]]
    raise TrainingError(f"descriptor spec of {descriptor!r} lists no elements")


def prepare(store: Store, spec: TrainingSpec) -> _Prepared:
    """Split index, least-squares reference energies and feature scaling (one pass)."""
    desc, has_deriv = _feature_config(store, spec.descriptor)
    elements = _elements_of(desc, spec.descriptor)
    forces = spec.force_weight > 0
    if forces and not has_deriv:
        raise TrainingError(
            f"{store.path} was featurized without derivatives: force training needs them "
            "(featurize with derivatives=True) or set force_weight=0"
        )
    # least squares E_s ≈ Σ_e n_{s,e} ref_e over training structures (normal equations),
    # accumulated partition by partition during the split pass
    from ase.data import atomic_numbers

    zs = np.array([atomic_numbers[e] for e in elements])
    ata = np.zeros((len(elements), len(elements)))
    atb = np.zeros(len(elements))
    per_atom: list[tuple[np.ndarray, np.ndarray]] = []  # (S_train, n_el) counts, (S_train,) E

    def visit(p: int, batch: StructureBatch, split: np.ndarray) -> None:
        nonlocal ata, atb
        sel = np.flatnonzero((split == 0) & np.isfinite(batch.energy))
        if sel.size == 0:
            return
        comp = np.stack(
            [np.bincount(batch.structure_index, batch.numbers == z, batch.n_structures)
             for z in zs], 1,
        )[sel]  # fmt: skip
        ata += comp.T @ comp
        atb += comp.T @ batch.energy[sel]
        per_atom.append((comp, batch.energy[sel]))

    index = build_split_index(store, spec.validation_fraction, spec.test_fraction, spec.seed, visit)
    if index.count("train") == 0:
        raise TrainingError(f"{store.path}: the training split is empty")
    ref = np.linalg.lstsq(ata, atb, rcond=None)[0]
    resid = np.concatenate([(e - c @ ref) / c.sum(1) for c, e in per_atom])
    energy_scale = float(resid.std()) if resid.size > 1 and resid.std() > 1e-8 else 1.0
    per_atom.clear()
    stats = store.attrs.get("statistics", {}).get(spec.descriptor)
    reader = PartitionReader(store, spec.descriptor, elements, index, False)
    n_features: dict[str, int] = {}
    if not stats:  # compute scaling statistics over the training split
        stats = _statistics(reader, elements)
    scaling = {}
    for e in elements:
        if e not in stats:
            raise TrainingError(f"{store.path}: no statistics for element {e}")
        n_features[e] = len(stats[e]["mean"])
        scaling[e] = scaling_parameters(stats[e], spec.scaling, spec.scale_min, spec.scale_max)
    return _Prepared(
        store=store,
        descriptor=spec.descriptor,
        elements=elements,
        n_features=n_features,
        index=index,
        forces=forces,
        ref_energy=ref,
        energy_scale=energy_scale,
        scaling=scaling,
        statistics={
            e: {k: list(stats[e][k]) for k in ("min", "max", "mean", "sigma")} for e in elements
        },
        descriptor_spec=dict(desc) if isinstance(desc, Mapping) else None,
    )


def _statistics(reader: PartitionReader, elements: list[str]) -> dict[str, dict[str, list]]:
    """n2p2 scaling statistics of the training split (store without statistics attrs)."""
    acc: dict[str, list[np.ndarray]] = {e: [] for e in elements}
    for p in reader.index.partitions_with("train"):
        part = reader.get(p)
        for e, ea in part.elements.items():
            struct = np.searchsorted(part.offsets, ea.atom_index, side="right") - 1
            acc[e].append(ea.values[part.split[struct] == 0])
    out = {}
    for e, parts in acc.items():
        if parts:
            v = np.concatenate(parts)
            out[e] = {
                "min": v.min(0).tolist(),
                "max": v.max(0).tolist(),
                "mean": v.mean(0).tolist(),
                "sigma": v.std(0, ddof=1).tolist() if v.shape[0] > 1 else [0.0] * v.shape[1],
            }
    return out


def _build_model(prep: _Prepared, spec: TrainingSpec) -> HDNNP:
    torch.manual_seed(spec.seed)
    model = HDNNP(prep.elements, prep.n_features, spec.hidden, spec.activation).to(_dtype(spec))
    # scaling kept as data (n2p2 export writes its statistics), set in the training dtype
    model.set_scaling_from(
        {
            "mode": spec.scaling,
            "smin": spec.scale_min,
            "smax": spec.scale_max,
            "statistics": prep.statistics,
        }
    )
    model.ref_energy.copy_(torch.as_tensor(prep.ref_energy))
    model.energy_scale.fill_(prep.energy_scale)
    if spec.n2p2_compatible:
        from dparallel.descriptors import ACSF
        from dparallel.n2p2.potential import n2p2_problems

        problems = n2p2_problems(ACSF.from_dict(prep.descriptor_spec or {}), model)
        if problems:
            raise TrainingError("n2p2_compatible: " + "; ".join(problems))
    return model


def _dtype(spec: TrainingSpec) -> torch.dtype:
    return torch.float64 if spec.dtype == "float64" else torch.float32


def _optimizer(model: HDNNP, spec: TrainingSpec, n_train: int) -> torch.optim.Optimizer:
    if spec.optimizer == "kalman":  # one update per mini-batch
        return make_kalman(model, spec, math.ceil(n_train / spec.batch_size))
    cls = torch.optim.AdamW if spec.optimizer == "adamw" else torch.optim.Adam
    return cls(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)


def _scheduler(opt: torch.optim.Optimizer, spec: TrainingSpec) -> Any:
    if spec.optimizer == "kalman":  # anneals its own noise parameters
        return None
    if spec.schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, spec.epochs, eta_min=spec.lr_min)
    if spec.schedule == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, factor=spec.plateau_factor, patience=spec.plateau_patience, min_lr=spec.lr_min
        )
    return None


# --------------------------------------------------------------------- evaluate
def evaluate_split(
    model: HDNNP,
    reader: PartitionReader,
    split: str,
    spec: TrainingSpec,
    keep: bool = False,
) -> Metrics:
    """Errors of ``model`` on every structure of ``split`` (streamed, no shuffling)."""
    m = Metrics()
    for batch in _iterate(
        reader,
        split,
        max(64, spec.batch_size),
        shuffle=False,
        prefetch=spec.prefetch,
        dtype=_dtype(spec),
    ):
        e, f = predict_batch(model, batch, reader.forces)
        loss = float(_loss(e, f, batch, spec.force_weight).detach())
        m.add(
            e.detach(),
            batch.energy,
            batch.atom_counts,
            None if f is None else f.detach(),
            batch.forces if f is not None else None,
            loss,
            keep,
        )
    return m


# -------------------------------------------------------------------- train
@dataclass
class TrainResult:
    """Outcome of :func:`train`: final model, per-epoch history and final test metrics."""

    model: HDNNP
    model_dir: Path
    history: list[dict[str, Any]]
    test: dict[str, float]
    validation: dict[str, float]
    best_epoch: int
    seconds: float


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state()}


def _row(epoch: int, lr: float, train: dict, val: dict, seconds: float) -> dict[str, Any]:
    row: dict[str, Any] = {"epoch": epoch, "lr": lr}
    for split, d in (("train", train), ("validation", val)):
        for k, v in d.items():
            row[f"{split}_{k}"] = v
    row["seconds"] = seconds
    return row


def _write_metrics(model_dir: Path, history: list[dict], extra: dict | None = None) -> None:
    """metrics.csv/json with the unit in each error's name (meV/atom, meV/Å)."""
    rows = [with_units(r) for r in history]
    if rows:
        tmp = model_dir / (METRICS_CSV + ".tmp")
        fields = list(dict.fromkeys(k for r in rows for k in r))  # resumed rows may add keys
        with tmp.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
        tmp.replace(model_dir / METRICS_CSV)
    extra = dict(extra or {})
    if "final" in extra:
        extra["final"] = {split: with_units(m) for split, m in extra["final"].items()}
    doc = {"epochs": rows, **extra}
    tmp = model_dir / (METRICS_JSON + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=float))
    tmp.replace(model_dir / METRICS_JSON)


def model_file(model: HDNNP, spec: TrainingSpec, descriptor: dict | None) -> dict[str, Any]:
    """The saved trained model (``model.pt``): config, weights, descriptor spec, spec."""
    return {
        "format": "dparallel-hdnnp",
        "version": 1,
        "model_config": model.config(),
        "state_dict": model.state_dict(),
        "descriptor": descriptor,
        "descriptor_kind": spec.descriptor,
        "spec": spec.to_dict(),
    }


def load_model(
    path: str | os.PathLike[str], dtype: torch.dtype | None = None
) -> tuple[HDNNP, dict]:
    """Rebuild the :class:`HDNNP` from a ``model.pt`` (or a MODEL_DIR); returns (model, file)."""
    path = Path(path)
    if path.is_dir():
        path = path / MODEL
    if not path.is_file():
        raise TrainingError(f"no trained model at {path}; run `dparallel train` first")
    data = load_torch_file(path, "model file")
    if data.get("format") != "dparallel-hdnnp":
        raise TrainingError(f"{path} is not a dparallel model file")
    model = HDNNP(**data["model_config"])
    sd = data["state_dict"]
    model = model.to(next(iter(sd.values())).dtype)
    model.load_state_dict(sd)
    if dtype is not None:
        model = model.to(dtype)
    model.eval()
    return model, data


def _check_complete(store: Store, spec: TrainingSpec) -> dict[str, Any]:
    """How much of the source the store holds; refuse an incomplete one unless allowed."""
    done = len(store.done_partitions())
    coverage = {
        "store": str(store.path),
        "complete": done == store.n_partitions,
        "partitions_used": done,
        "partitions_total": store.n_partitions,
        "structures_used": store.n_structures,
        "structures_in_source": store.plan.n_structures,
    }
    if coverage["complete"]:
        return coverage
    amount = (
        f"{done} of {store.n_partitions} partitions are featurized ({store.n_structures} of "
        f"{store.plan.n_structures} structures)"
    )
    if not spec.allow_incomplete:
        raise TrainingError(
            f"{store.path} is incomplete: {amount}. Finish it (rerun the same featurize "
            "command), or train on what is there with --allow-incomplete "
            "(allow_incomplete: true)"
        )
    log.warning("training on an incomplete store %s: %s", store.path, amount)
    return coverage


def train(
    store: Store | str | os.PathLike[str],
    model_dir: str | os.PathLike[str],
    spec: TrainingSpec | None = None,
    *,
    resume: bool = False,
    callback: Callable[[dict[str, Any]], None] | None = None,
    stop_after: int | None = None,
    run_name: str | None = None,
) -> TrainResult:
    """Train an HDNNP on a featurized store; writes checkpoints, metrics and plots.

    Parameters
    ----------
    store
        Featurized store (or its path) with ``features/<spec.descriptor>``.
    model_dir
        Output directory: ``checkpoint.pt`` (every epoch), ``best.pt``, ``model.pt``
        (best model), ``metrics.csv``/``metrics.json``, ``spec.json``, PNG plots.
    spec
        Training configuration (defaults: :class:`TrainingSpec`).
    resume
        Continue from ``model_dir/checkpoint.pt`` (same spec except ``epochs``).
    callback
        Called with each epoch's metrics row (the CLI prints it).
    stop_after
        Stop after this many epochs in this call (used to test resume).
    run_name
        Name on the dashboard (default: the directory name).

    Returns
    -------
    TrainResult

    Raises
    ------
    TrainingError
        The store is incomplete and ``spec.allow_incomplete`` is off; a checkpoint or
        model file is unreadable, corrupt or holds more than tensors and plain data;
        the store lacks the features or derivatives the spec needs.
    """
    t_start = time.perf_counter()
    spec = spec or TrainingSpec()
    store = store if isinstance(store, Store) else open_store(store)
    coverage = _check_complete(store, spec)
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    run_name = run_name or model_dir.resolve().name
    if spec.threads:
        torch.set_num_threads(spec.threads)
    prep = prepare(store, spec)
    log.info(
        "splits: %d train, %d validation, %d test structures",
        prep.index.count("train"),
        prep.index.count("validation"),
        prep.index.count("test"),
    )
    dtype = _dtype(spec)
    model = _build_model(prep, spec)
    opt = _optimizer(model, spec, prep.index.count("train"))
    sched = _scheduler(opt, spec)
    history: list[dict[str, Any]] = []
    start_epoch, best_val, best_epoch, bad = 0, math.inf, -1, 0
    ckpt_path = model_dir / CHECKPOINT
    if resume:
        if not ckpt_path.is_file():
            raise TrainingError(f"--resume: no checkpoint at {ckpt_path}")
        ck = load_torch_file(ckpt_path, "checkpoint")
        if not set(ck) >= _CHECKPOINT_KEYS:
            raise TrainingError(
                f"{ckpt_path}: not a dparallel checkpoint (missing "
                f"{', '.join(sorted(_CHECKPOINT_KEYS - set(ck)))})"
            )
        old = dict(ck["spec"])
        new = spec.to_dict()
        fields = TrainingSpec.model_fields  # keys added since the checkpoint: their default
        diff = sorted(
            k for k in new if k not in _RESUMABLE_KEYS and old.get(k, fields[k].default) != new[k]
        )
        if diff:
            raise TrainingError(
                f"--resume: {ckpt_path} was trained with another config ({', '.join(diff)} "
                "differ); use the same config or a new MODEL_DIR"
            )
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        if sched is not None and ck.get("scheduler") is not None:
            sched.load_state_dict(ck["scheduler"])
        torch.set_rng_state(ck["rng"]["torch"])
        start_epoch = int(ck["epoch"]) + 1
        best_val, best_epoch, bad = ck["best_val"], ck["best_epoch"], ck["bad_epochs"]
        history = list(ck["history"])
        log.info("resumed from %s at epoch %d", ckpt_path, start_epoch)
    (model_dir / SPEC_JSON).write_text(json.dumps(spec.to_dict(), indent=1))
    train_reader = PartitionReader(
        store, spec.descriptor, prep.elements, prep.index, prep.forces, _CACHE_BYTES
    )
    has_val = prep.index.count("validation") > 0
    stopped_early = False
    for epochs_run, epoch in enumerate(range(start_epoch, spec.epochs)):
        if stop_after is not None and epochs_run >= stop_after:
            break
        t0 = time.perf_counter()
        model.train()
        m = Metrics()
        for batch in _iterate(
            train_reader,
            "train",
            spec.batch_size,
            shuffle=True,
            seed=spec.seed,
            epoch=epoch,
            shuffle_buffer=spec.shuffle_buffer,
            prefetch=spec.prefetch,
            dtype=dtype,
        ):
            if isinstance(opt, KalmanFilter):
                e, f, loss = kalman_step(model, opt, batch, spec, prep.forces)
            else:
                opt.zero_grad(set_to_none=True)
                e, f = predict_batch(model, batch, prep.forces, create_graph=True)
                loss = _loss(e, f, batch, spec.force_weight)
                loss.backward()
                opt.step()
            m.add(
                e.detach(),
                batch.energy,
                batch.atom_counts,
                None if f is None else f.detach(),
                batch.forces if f is not None else None,
                float(loss.detach()),
            )
        model.eval()
        val = evaluate_split(model, train_reader, "validation", spec) if has_val else None
        train_sum = m.summary()
        val_sum = val.summary() if val is not None else dict.fromkeys(train_sum, float("nan"))
        monitor = val_sum["loss"] if has_val else train_sum["loss"]
        lr = opt.param_groups[0]["lr"]
        if isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau):
            sched.step(monitor)
        elif sched is not None:
            sched.step()
        if monitor < best_val:
            best_val, best_epoch, bad = monitor, epoch, 0
            save_torch_file(model_file(model, spec, prep.descriptor_spec), model_dir / BEST)
        else:
            bad += 1
        row = _row(epoch, lr, train_sum, val_sum, time.perf_counter() - t0)
        row["train_structures"] = prep.index.count("train")  # per epoch, for the rate shown
        history.append(row)
        save_torch_file(
            {
                "epoch": epoch,
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict() if sched is not None else None,
                "rng": _rng_state(),
                "loader": {"seed": spec.seed, "next_epoch": epoch + 1},
                "best_val": best_val,
                "best_epoch": best_epoch,
                "bad_epochs": bad,
                "history": history,
                "spec": spec.to_dict(),
            },
            ckpt_path,
        )
        _write_metrics(model_dir, history)
        _publish(run_name, row)
        if callback is not None:
            callback(row)
        if spec.early_stopping and bad >= spec.early_stopping:
            log.info("early stopping at epoch %d (best %d)", epoch, best_epoch)
            stopped_early = True
            break
    finished = stopped_early or (history and history[-1]["epoch"] == spec.epochs - 1)
    if not finished:  # stopped by stop_after: the checkpoint is the result
        return TrainResult(
            model, model_dir, history, {}, {}, best_epoch, time.perf_counter() - t_start
        )
    best, _ = load_model(model_dir / BEST)
    best = best.to(dtype)
    save_torch_file(model_file(best, spec, prep.descriptor_spec), model_dir / MODEL)
    final: dict[str, dict[str, float]] = {}
    parity: dict[str, dict[str, np.ndarray]] = {}
    for split in ("validation", "test"):
        if prep.index.count(split):
            mm = evaluate_split(best, train_reader, split, spec, keep=True)
            final[split] = mm.summary()
            parity[split] = mm.parity_arrays()
    extra = {
        "best_epoch": best_epoch,
        "final": final,
        "splits": {s: prep.index.count(s) for s in ("train", "validation", "test")},
        "test_ids": prep.index.ids_of("test").tolist(),
        "reference_energies": dict(zip(prep.elements, prep.ref_energy.tolist(), strict=True)),
        "data": coverage,
    }
    _write_metrics(model_dir, history, extra)
    try:
        from dparallel.train.plots import plot_learning_curves, plot_parity

        plot_learning_curves(history, model_dir / "learning_curves.png")
        for split, arrays in parity.items():
            plot_parity(arrays, model_dir / f"parity_{split}.png", title=split)
    except Exception:
        log.warning("could not write plots", exc_info=True)
    return TrainResult(
        best,
        model_dir,
        history,
        final.get("test", {}),
        final.get("validation", {}),
        best_epoch,
        time.perf_counter() - t_start,
    )


def _publish(run: str, row: Mapping[str, Any]) -> None:
    """Send the epoch's metrics to the dashboard (no-op without a cluster)."""
    try:
        from dparallel.dashboard.events import publish_train_metrics
    except ImportError:  # pragma: no cover
        return
    splits: tuple[Literal["train", "validation"], ...] = ("train", "validation")
    for split in splits:
        loss = row.get(f"{split}_loss")
        if loss is None or not math.isfinite(loss):
            continue
        publish_train_metrics(
            run,
            int(row["epoch"]),
            split,
            float(loss),
            row.get(f"{split}_energy_rmse"),
            row.get(f"{split}_force_rmse"),
        )
