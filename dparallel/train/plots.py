"""PNG plots of a training run (matplotlib, Agg backend): learning curves and parity."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel._files import write_with

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["plot_learning_curves", "plot_parity"]


def _pyplot():  # noqa: ANN202
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
        for split in ("train", "validation"):
            y = np.array([r.get(f"{split}_{key}", np.nan) for r in history], float) * scale
            if np.isfinite(y).any():
                ax.plot(ep, y, label=split)
        ax.set_yscale("log")
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
