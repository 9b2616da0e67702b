"""Reporting a run: error metrics, evaluation of a split, metrics files, PNG plots, callbacks.

Each finished epoch becomes one row (:func:`epoch_row`) that goes to ``metrics.csv`` /
``metrics.json`` and to every epoch callback. A callback is how a caller follows training
(the CLI's progress bar, the Dask dashboard's training page); returning ``True`` from one
stops the run after that epoch, its checkpoint being the result (as an interrupted run).
"""

from __future__ import annotations

import contextlib
import csv
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dparallel._files import FULL_DISK_ADVICE, new_file, strict_json, write_file, write_with
from dparallel.config import read_json_object
from dparallel.errors import TrainingError
from dparallel.nn.folders import model_folder
from dparallel.train.device import Target
from dparallel.train.feed import BatchFeed
from dparallel.train.metric_units import with_units, without_units
from dparallel.train.objective import predict_batch

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping, Sequence

    from dparallel.nn import HDNNP
    from dparallel.train.batch import Batch
    from dparallel.train.data import PartitionReader
    from dparallel.train.spec import TrainingSpec

log = logging.getLogger(__name__)

METRICS_CSV = "metrics.csv"
METRICS_JSON = "metrics.json"

#: Called with each epoch's metrics row; returning ``True`` stops training after it.
EpochCallback = Callable[[dict[str, Any]], bool | None]


@dataclass
class Metrics:
    """Running sums for energy-per-atom and force-component errors (eV, eV/Å) over a split.

    ``loss`` is the objective over the whole split (MSE of energy per atom + force_weight ·
    MSE of force components, entries with a NaN label left out), not a mean of per-batch
    losses, so batches of unequal size (a partition's last) count by what they hold. The
    sums stay tensors on the batches' device until :meth:`summary` (no host
    synchronisation per batch).
    """

    force_weight: float = 0.0
    sums: dict[str, Any] = field(default_factory=dict)  # n_e, se_e, ae_e, n_f, se_f, ae_f
    parity: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def add(
        self, energy: torch.Tensor, forces: torch.Tensor | None, batch: Batch, keep: bool = False
    ) -> None:
        """Accumulate the predictions on one batch (energies (S,), forces (N, 3) or None)."""
        with torch.no_grad():
            n_atoms, e_ref = batch.atom_counts, batch.energy
            de = (energy - e_ref) / n_atoms
            pair = (e_ref / n_atoms, energy / n_atoms) if keep else ()
            self._errors("e", de, torch.isfinite(e_ref), pair)
            if forces is not None:
                pair = (batch.forces, forces) if keep else ()
                self._errors("f", forces - batch.forces, torch.isfinite(batch.forces), pair)

    def add_errors(self, energy: torch.Tensor, forces: torch.Tensor | None) -> None:
        """Accumulate errors already computed: energy per atom (S,) in eV/atom, forces
        (N, 3) in eV/Å; non-finite entries (no reference: the caller has checked that its
        predictions are finite) are left out."""
        with torch.no_grad():
            self._errors("e", energy, torch.isfinite(energy), ())
            if forces is not None:
                self._errors("f", forces, torch.isfinite(forces), ())

    def _errors(self, kind: str, diff: torch.Tensor, ok: torch.Tensor, parity: tuple) -> None:
        """Add ``diff`` where the label is finite (``ok``) to the sums of ``kind``; keep
        ``parity``'s. A non-finite prediction stays in: a diverged model's errors are NaN."""
        diff = torch.where(ok, diff, 0.0)
        for name, value in (
            ("n", ok.sum()),
            ("se", (diff**2).sum().double()),
            ("ae", diff.abs().sum().double()),
        ):
            self.sums[f"{name}_{kind}"] = self.sums.get(f"{name}_{kind}", 0) + value
        for name, x in zip(("ref", "pred"), parity, strict=False):
            self.parity.setdefault(f"{kind}_{name}", []).append(x[ok].detach().cpu().numpy())

    def summary(self) -> dict[str, float]:
        """energy_rmse/mae (eV/atom), force_rmse/mae (eV/Å), loss (NaN when not measured:
        no energy, nor a force with ``force_weight`` > 0, in what was added)."""
        nan = float("nan")
        out: dict[str, float] = {}
        mse: dict[str, float] = {}
        for kind, name in (("e", "energy"), ("f", "force")):
            n = int(self.sums.get(f"n_{kind}", 0))
            se, ae = (float(self.sums.get(f"{s}_{kind}", 0.0)) for s in ("se", "ae"))
            out[f"{name}_rmse"] = math.sqrt(se / n) if n else nan
            out[f"{name}_mae"] = ae / n if n else nan
            mse[kind] = se / n if n else 0.0  # as the objective: no label, no term
        loss = mse["e"] + (self.force_weight * mse["f"] if self.force_weight > 0 else 0.0)
        counts = {kind: int(self.sums.get(f"n_{kind}", 0)) for kind in ("e", "f")}
        measured = counts["e"] > 0 or (self.force_weight > 0 and counts["f"] > 0)
        return {"loss": loss if measured else nan, **out}  # no label of the objective: NaN

    def parity_arrays(self) -> dict[str, np.ndarray]:
        """Concatenated reference/predicted arrays kept with ``keep=True``."""
        return {k: np.concatenate(v) for k, v in self.parity.items()}


def evaluate_split(
    model: HDNNP,
    reader: PartitionReader,
    split: str,
    spec: TrainingSpec,
    keep: bool = False,
    feed: BatchFeed | None = None,
) -> Metrics:
    """Errors of ``model`` on every structure of ``split`` (no shuffling; ``feed``: the run's,
    else streamed to where the model is)."""
    if feed is None:
        param = next(model.parameters())
        feed = BatchFeed(Target(param.dtype, param.device))
    m = Metrics(spec.force_weight)
    with contextlib.closing(feed.batches(reader, split, spec)) as batches:  # stops the threads
        for batch in batches:
            energy, forces = predict_batch(model, batch, reader.forces)
            m.add(energy, forces, batch, keep)
            del batch  # not held while the next one is read
    return m


def epoch_row(epoch: int, lr: float, train: dict, val: dict, seconds: float) -> dict[str, Any]:
    """One epoch's row: epoch, lr, ``train_*`` and ``validation_*`` metrics, seconds."""
    row: dict[str, Any] = {"epoch": epoch, "lr": lr}
    for split, d in (("train", train), ("validation", val)):
        row.update({f"{split}_{k}": v for k, v in d.items()})
    return {**row, "seconds": seconds}


def write_metrics(model_dir: Path, history: list[dict], extra: dict | None = None) -> None:
    """metrics.csv/json with the unit in each error's name (meV/atom, meV/Å)."""
    rows = [with_units(r) for r in history]
    if rows:
        fields = list(dict.fromkeys(k for r in rows for k in r))  # resumed rows may add keys
        with new_file(model_dir / METRICS_CSV, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
    extra = dict(extra or {})
    if "final" in extra:
        extra["final"] = {split: with_units(m) for split, m in extra["final"].items()}
    doc = {"epochs": rows, **extra}
    text = strict_json(doc, indent=1, what=METRICS_JSON, missing=True)  # NaN: not measured
    write_file(model_dir / METRICS_JSON, text)


def read_history(model_dir: str | Path) -> list[dict[str, Any]]:
    """The epoch rows ``metrics.json`` in ``model_dir`` holds, errors back in eV/atom and
    eV/Å (as the callbacks get them); ``[]`` without a readable file. A resumed run's
    callers replay them, so the dashboard's curves go on from the earlier epochs."""
    rows = read_json_object(Path(model_dir) / METRICS_JSON).get("epochs", [])
    return [without_units(r) for r in rows if isinstance(r, dict) and "epoch" in r]


def split_ids(model_dir: str | os.PathLike[str], split: str) -> tuple[list[int], int | None]:
    """The source indices of ``split`` (``test`` or ``validation``) that ``metrics.json`` in
    ``model_dir`` names (``test_ids``, ``validation_ids``: structures of the file the store
    was made from) and how many structures that file held (``None``: not recorded).

    Raises :class:`TrainingError` where ``metrics.json`` names none (no finished run there).
    """
    path = model_folder(model_dir) / METRICS_JSON  # model_dir may name its deployed.pt
    if not path.is_file():  # an n2p2 potential, exported or not, records no splits
        raise TrainingError(
            f"{path.parent}: no {METRICS_JSON}, so no {split} split to evaluate (the "
            "directory `dparallel train` wrote records it, its n2p2 export does not): give "
            f"that directory, or DATA of the {split} structures alone"
        )
    doc = read_json_object(path)
    ids = doc.get(f"{split}_ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise TrainingError(
            f"{path}: no {split}_ids (written when `dparallel train` finishes): give the "
            f"directory a finished training run wrote, or DATA of the {split} structures alone"
        )
    data = doc.get("data")
    held = data.get("structures_in_source") if isinstance(data, dict) else None
    return ids, held if isinstance(held, int) else None


def write_plots(
    model_dir: Path, history: list[dict[str, Any]], parity: dict[str, dict[str, np.ndarray]]
) -> None:
    """Learning curves and parity plots as PNGs (a warning, never an error, if they fail)."""
    try:
        plot_learning_curves(history, model_dir / "learning_curves.png")
        for split, arrays in parity.items():
            plot_parity(arrays, model_dir / f"parity_{split}.png", title=split)
    except Exception as exc:  # one line on the terminal; the traceback at debug level (-v)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        reason = reason.removesuffix(f"; {FULL_DISK_ADVICE}")  # a rerun would train anew
        log.warning(
            "could not write the plots in %s (%s); the model and metrics files are written, "
            "only the PNG plots are missing",
            model_dir,
            reason,
        )
        log.debug("the plots failed with", exc_info=True)


def notify(callbacks: Iterable[EpochCallback], row: dict[str, Any]) -> bool:
    """Call every callback with ``row`` in order; whether any asked to stop."""
    return any([bool(callback(row)) for callback in callbacks])  # a list: every one is called


def _pyplot():  # noqa: ANN202
    import sys

    if "matplotlib" not in sys.modules:
        _matplotlib_folder()
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def plot_learning_curves(history: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Energy RMSE (meV/atom) and force RMSE (meV/Å) per epoch, train and validation."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ep = [r["epoch"] for r in history]
    for ax, key, label, scale in (
        (axes[0], "loss", "loss", 1.0),
        (axes[1], "energy_rmse", "energy RMSE (meV/atom)", 1e3),
        (axes[2], "force_rmse", "force RMSE (meV/Å)", 1e3),
    ):
        logarithmic = True  # unless a curve has a zero (forces of lone atoms: exactly 0)
        for split in ("train", "validation"):
            y = np.array([r.get(f"{split}_{key}", np.nan) for r in history], float) * scale
            if np.isfinite(y).any():
                ax.plot(ep, y, label=split)
                logarithmic &= bool(np.all(y[np.isfinite(y)] > 0))
        ax.set_yscale("log" if logarithmic else "linear")
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    write_with(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)
    return Path(path)


def plot_parity(arrays: Mapping[str, np.ndarray], path: str | Path, title: str = "") -> Path:
    """Predicted vs reference energy per atom (eV/atom) and force components (eV/Å)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.2))
    for ax, ref, pred, label in (
        (axes[0], "e_ref", "e_pred", "energy (eV/atom)"),
        (axes[1], "f_ref", "f_pred", "force component (eV/Å)"),
    ):
        if ref in arrays and arrays[ref].size:
            x, y = arrays[ref].ravel(), arrays[pred].ravel()
            ax.scatter(x, y, s=3, alpha=0.5)
            lo, hi = float(min(x.min(), y.min())), float(max(x.max(), y.max()))
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            rmse = float(np.sqrt(np.mean((x - y) ** 2)))
            name, unit = label.split(" (")
            ax.set_title(f"{title} {name}: RMSE {rmse * 1e3:.2f} m{unit.rstrip(')')}")
        ax.set_xlabel(f"reference {label}")
        ax.set_ylabel(f"predicted {label}")
    fig.tight_layout()
    write_with(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)
    return Path(path)


def _matplotlib_folder() -> None:
    """matplotlib's font cache and configuration live under ``~/.cache`` and ``~/.config``
    (XDG_*); where it cannot make them (a read-only home, as in containers) it warns on
    every import and rebuilds its font cache: it gets dparallel's writable cache folder
    (``MPLCONFIGDIR``) instead, unless the user named one."""
    import os

    from dparallel.config import writable_cache_dir
    from dparallel.errors import ConfigError

    if os.environ.get("MPLCONFIGDIR"):
        return
    try:
        for variable, default in (("XDG_CACHE_HOME", ".cache"), ("XDG_CONFIG_HOME", ".config")):
            folder = Path(os.environ.get(variable) or Path.home() / default) / "matplotlib"
            folder.mkdir(parents=True, exist_ok=True)
            if not os.access(folder, os.W_OK | os.X_OK):
                raise PermissionError(folder)
    except (OSError, RuntimeError):  # RuntimeError: no home folder
        with contextlib.suppress(ConfigError):
            os.environ["MPLCONFIGDIR"] = str(writable_cache_dir("matplotlib"))
