"""Build featurized stores for the training tests, following the featurize store contract.

Ingests with :func:`dparallel.workflow.ingest.ingest`, computes ACSF in-process per
partition and writes ``features/acsf/<E>`` (values, atom_index) and
``features/acsf/<E>/d/<F>`` (pair_first, pair_second, center, vectors, feature_index,
dG_dr) with :meth:`Store.write_partition_arrays`; root attrs ``config.features`` and
``statistics.acsf.<E>`` (n2p2 scaling.data semantics). The lead's ``featurize()`` writes
the same layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dparallel.descriptors import ACSF
from dparallel.store import Store, open_store
from dparallel.workflow.ingest import ingest


def _set_attrs(store: Store, updates: dict) -> None:
    """Merge ``updates`` into the store's ``dparallel`` root attributes."""
    meta = dict(store.attrs)
    meta.update(updates)
    store._root.attrs["dparallel"] = meta  # noqa: SLF001 (test helper; featurize owns this)
    store._meta = meta  # noqa: SLF001


def build_store(
    data: str | Path,
    store_path: str | Path,
    acsf: ACSF,
    *,
    derivatives: bool = True,
    partition_atoms: int = 300,
) -> Store:
    """Ingest ``data`` and write ACSF features (+ derivatives) for every partition."""
    store = ingest(data, store_path, partition_atoms=partition_atoms, overwrite=True).store
    acc: dict[str, list[np.ndarray]] = {e: [] for e in acsf.elements}
    for p in range(store.n_partitions):
        batch = store.read_partition(p)
        res = acsf.compute(batch, derivatives=derivatives, dtype=torch.float64)
        for e, r in res.items():
            base = f"features/acsf/{e}"
            store.write_partition_arrays(
                p, {"values": r.values.numpy(), "atom_index": r.atom_index.numpy()}, group=base
            )
            acc[e].append(r.values.numpy())
            if derivatives:
                for f, pd in r.pairs.items():
                    store.write_partition_arrays(
                        p,
                        {
                            "pair_first": pd.pair_first.numpy(),
                            "pair_second": pd.pair_second.numpy(),
                            "center": pd.center.numpy(),
                            "vectors": pd.vectors.numpy(),
                            "feature_index": pd.feature_index.numpy(),
                            "dG_dr": pd.dG_dr.numpy(),
                        },
                        group=f"{base}/d/{f}",
                    )
    stats = {}
    for e, parts in acc.items():
        v = np.concatenate(parts) if parts else np.zeros((0, acsf.n_features(e)))
        if v.shape[0] == 0:
            continue
        stats[e] = {
            "count": [int(v.shape[0])] * v.shape[1],
            "min": v.min(0).tolist(),
            "max": v.max(0).tolist(),
            "mean": v.mean(0).tolist(),
            "sigma": (v.std(0, ddof=1) if v.shape[0] > 1 else np.zeros(v.shape[1])).tolist(),
        }
    config = dict(store.attrs["config"])
    config["features"] = {
        "acsf": acsf.to_dict(),
        "neighbor_sum": None,
        "derivatives": derivatives,
        "dtype": "float64",
    }
    _set_attrs(store, {"config": config, "statistics": {"acsf": stats}})
    return open_store(store.path)


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
