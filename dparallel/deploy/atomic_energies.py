"""Each element's network alone as a ``torch.export`` file: descriptors → atomic energies.

``atomic_energy_<E>.pt2`` takes (n, F_e) unscaled descriptors (dynamic n ≥ 0) and returns
(n,) atomic energies (eV, reference energy included). It is differentiable after
``torch.export.load``, so forces follow from dE/dG and the descriptor derivatives.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dparallel._files import write_with
from dparallel.errors import TrainingError
from dparallel.nn import HDNNP, load_exported_program

if TYPE_CHECKING:
    import os

__all__ = ["export_atomic_energies", "load_atomic_energies"]


class _AtomicEnergy(nn.Module):
    """One element's descriptor → atomic-energy map (scaling, MLP, scale, reference)."""

    def __init__(self, model: HDNNP, element: str) -> None:
        super().__init__()
        self.model = model
        self.element = element

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        return self.model.atomic_energies({self.element: values})[self.element]


def export_atomic_energies(model: HDNNP, model_dir: str | os.PathLike[str]) -> list[str]:
    """``torch.export`` each element's network to ``MODEL_DIR/atomic_energy_<E>.pt2``;
    returns the file names."""
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
            Path(model_dir) / name,
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
