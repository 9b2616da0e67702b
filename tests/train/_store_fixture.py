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

    from dparallel.store import Store


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
