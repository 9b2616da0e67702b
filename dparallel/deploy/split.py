"""A batch's structures shared among threads for a compiled engine of
:meth:`~dparallel.deploy.deployed.DeployedModel.predict` (its kernels release the GIL).

Each thread runs the engine on consecutive whole structures; a structure's energy, forces
and virial depend on its own atoms only, so the outputs equal one call's to rounding, as
those of another batch size do (measured: water identical, a Cu/Ag/Au cluster 4e-16 of
its largest force).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from dparallel.errors import UnknownElementError
from dparallel.neighbors import Neighbors, select_structures
from dparallel.types import StructureBatch

__all__ = ["Engine", "Outputs", "split_points", "threaded"]

#: ``energy``/``energies``/``forces`` arrays and the virial (S, 3, 3) or None.
Outputs = tuple[dict[str, np.ndarray], np.ndarray | None]
#: A compiled CPU route of :meth:`DeployedModel.predict`: (batch, neighbors, forces, stress).
Engine = Callable[[StructureBatch, Neighbors, bool, bool], Outputs]


def split_points(batch: StructureBatch, nb: Neighbors, parts: int) -> list[int]:
    """Structure boundaries ``[0, …, S]`` cutting ``batch`` into at most ``parts`` runs of
    about equal work (pairs per centre squared: the angular terms' cost)."""
    per_centre = np.bincount(nb.pair_first, minlength=batch.n_atoms).astype(np.float64)
    cost = np.bincount(batch.structure_index, per_centre**2 + 1.0, batch.n_structures)
    total = np.concatenate([[0.0], np.cumsum(cost)])
    targets = total[-1] * np.arange(1, parts) / parts
    hi = np.searchsorted(total, targets)  # the boundary nearest each target
    cuts = np.where(targets - total[hi - 1] < total[hi] - targets, hi - 1, hi)
    return sorted({0, batch.n_structures, *np.clip(cuts, 1, batch.n_structures - 1).tolist()})


def threaded(
    engine: Engine, batch: StructureBatch, nb: Neighbors, forces: bool, stress: bool, threads: int
) -> Outputs:
    """``engine(batch, nb, forces, stress)`` with the structures shared among ``threads``
    threads (one call when there is one thread or one structure)."""
    if threads <= 1 or batch.n_structures <= 1:
        return engine(batch, nb, forces, stress)
    cuts = split_points(batch, nb, threads)
    parts = [
        (batch.select(a, b), select_structures(nb, batch.offsets, a, b))
        for a, b in itertools.pairwise(cuts)
    ]

    def run(first: int, part: tuple[StructureBatch, Neighbors]) -> Outputs:
        try:
            return engine(part[0], part[1], forces, stress)
        except UnknownElementError as exc:  # named by its structure in ``batch``, not ``part``
            raise UnknownElementError(first + exc.structure, exc.detail) from None

    with ThreadPoolExecutor(len(parts), thread_name_prefix="dparallel-predict") as pool:
        done = list(pool.map(run, cuts[:-1], parts))
    out = {k: np.concatenate([o[k] for o, _ in done]) for k in done[0][0]}
    virials = [w for _, w in done if w is not None]
    return out, (np.concatenate(virials) if virials else None)
