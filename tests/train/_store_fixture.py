"""Featurized stores for the training tests, made by the production code path.

:func:`build_store` runs :func:`dparallel.workflow.featurize.featurize_in_process` — the
same per-partition task and exact statistics merge as a Dask run, without a cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    import torch

    from dparallel.store import Store
    from dparallel.train.batch import Batch


def build_store(
    data: str | Path,
    store_path: str | Path,
    acsf: ACSF,
    *,
    derivatives: bool = True,
    partition_atoms: int = 300,
) -> Store:
    """Featurize ``data`` into ``store_path`` (ACSF values, + derivatives) in this process."""
    descriptors = DescriptorSet(acsf=acsf, derivatives=derivatives)
    return featurize_in_process(
        data,
        store_path,
        descriptors,
        FeaturizeOptions(partition_atoms=partition_atoms, overwrite=True),
    )


def ingested_store(data: str | Path, store_path: str | Path, partition_atoms: int = 300) -> Store:
    """Structures of ``data`` only (no descriptors), as ``dparallel ingest`` stores them."""
    from dparallel.workflow.ingest import IngestOptions, ingest

    options = IngestOptions(partition_atoms=partition_atoms, overwrite=True)
    return ingest(data, store_path, options).store


def small_acsf(r_cut: float = 4.0) -> ACSF:
    """A cheap ACSF set for tests: 4 radial + 2 angular functions."""
    return ACSF.uniform(
        ["Cu"],
        r_cut=r_cut,
        radial=[(0.05, 0.0), (2.0, 2.5), (2.0, 3.0), (2.0, 3.5)],
        narrow=[(0.01, 1.0, -1.0, 0.0), (0.01, 1.0, 1.0, 0.0)],
    )


def small_store(root: Path, n: int = 24, partition_atoms: int = 150) -> Store:
    """EMT Cu store with ``n`` structures (several partitions) in ``root``."""
    from dparallel.datasets import write_emt_cu

    data = write_emt_cu(root / f"cu{n}.xyz", n, seed=3)
    return build_store(data, root / f"cu{n}.zarr", small_acsf(), partition_atoms=partition_atoms)


def write_emt_alloy(
    path: Path, n: int, *, seed: int, repeat: tuple[int, int, int] = (2, 2, 2), pure: int = 0
) -> Path:
    """EMT Cu/Au structures (extxyz): structure k has Au with chance (k + 1)/(n + 1); the
    first ``pure`` are pure Cu (partitions without Au)."""
    import ase.io
    import numpy as np
    from ase.build import bulk
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator

    rng = np.random.default_rng(seed)
    frames = []
    for k in range(n):
        atoms = bulk("Cu", "fcc", a=3.8, cubic=True).repeat(repeat)
        au = rng.random(len(atoms)) < (k + 1) / (n + 1)
        if k >= pure:
            atoms.numbers[au] = 79
        atoms.positions += rng.normal(scale=0.08, size=atoms.positions.shape)
        atoms.calc = EMT()
        e, f = atoms.get_potential_energy(), atoms.get_forces()
        atoms.calc = SinglePointCalculator(atoms, energy=e, forces=f)
        frames.append(atoms)
    ase.io.write(path, frames, format="extxyz")
    return path


def training_route(
    store: Store, model_dir: Path, p: int, elements: list[str]
) -> tuple[Batch, torch.Tensor, torch.Tensor]:
    """Partition ``p`` as training predicts it with the model in ``model_dir`` (features
    and dG/dr read from the store, float64): its batch, energies (S,) and forces (N, 3)."""
    import torch

    from dparallel.train import assemble, build_split_index, load_model, make_batch, predict_batch
    from dparallel.train.data import load_partition

    hdnnp, _ = load_model(model_dir)
    index = build_split_index(store, 0.0, 0.0, seed=0)
    part = load_partition(store, p, "acsf", elements, index, True)
    batch = make_batch(
        assemble([(part, s) for s in range(part.n_structures)]), elements, torch.float64
    )
    energies, forces = predict_batch(hdnnp, batch, forces=True)
    return batch, energies, forces


def batch_arrays(batch: Batch) -> list[np.ndarray]:
    """A batch's arrays in a fixed order; a table without rows counts as absent (a
    partition's store may lack an element's group where it has no such atoms, and a batch
    from those lacks it too)."""
    import numpy as np
    import torch

    out = [batch.ids, batch.atom_counts, batch.structure_index, batch.energy, batch.forces]
    features = {e: r for e, r in (batch.features or {}).items() if r.values.shape[0]}
    for elem in sorted(features):
        res = features[elem]
        out += [res.values, res.atom_index]
        pairs = {f: pd for f, pd in (res.pairs or {}).items() if pd.pair_first.shape[0]}
        for f in sorted(pairs):
            pd = pairs[f]
            out += [pd.pair_first, pd.pair_second, pd.center, pd.vectors, pd.feature_index,
                    pd.dG_dr]  # fmt: skip
    return [np.asarray(x.cpu() if isinstance(x, torch.Tensor) else x) for x in out]


def assert_same_batches(expected: list[Batch], got: list[Batch]) -> None:
    """Same number of batches (more than one), array for array equal, dtypes included."""
    import numpy as np

    assert len(got) == len(expected) > 1
    for a, b in zip(expected, got, strict=True):
        for x, y in zip(batch_arrays(a), batch_arrays(b), strict=True):
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True)
