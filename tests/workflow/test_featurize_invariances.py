"""A store made by Dask workers holds, for every supercell, other cell choice, wrapped or
unwrapped, rotated, reflected, translated or permuted copy of a structure, the rows of the
original: the same per-atom features (to round-off) and the same per-pair dG/dr (to the
stored float32), rotated with the copy. Equivalent structures come from ASE's tools
(tests/equivalent_structures.py), never from dparallel."""

from __future__ import annotations

from typing import TYPE_CHECKING

import ase.io
import numpy as np
import pytest
from equivalent_structures import ELEMENTS, all_copies, image_of

from dparallel.descriptors import ACSF, NeighborSum
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.store import open_store
from dparallel.workflow.featurize import FeaturizeOptions, featurize

if TYPE_CHECKING:
    from dparallel.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def featurized(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """Every copy featurized by 2 worker processes (ACSF poly2 with an inner cutoff, types 2,
    3 and 9; neighbor sums), in partitions of ~60 atoms."""
    from distributed import Client, LocalCluster

    root = tmp_path_factory.mktemp("invariances")
    rows = all_copies()
    ase.io.write(root / "copies.traj", [c.atoms for c in rows])  # full float64 positions
    acsf = ACSF.uniform(ELEMENTS, r_cut=4.2, cutoff="poly2", alpha=0.2,
                        radial=[(0.5, 0.0), (1.0, 2.5)], narrow=[(0.1, 2.0, 1.0, 0.5)],
                        wide=[(0.1, 3.0, -1.0, 0.3)])  # fmt: skip
    ns = NeighborSum(ELEMENTS, r_cut=3.9, n_sensitivities=4, r_min=0.8)
    descriptors = DescriptorSet(acsf=acsf, neighbor_sum=ns, derivatives=True)
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0")
    with cluster, Client(cluster) as client:
        featurize(root / "copies.traj", root / "copies.zarr", descriptors,
                  FeaturizeOptions(client=client, partition_atoms=60))  # fmt: skip
    store = open_store(root / "copies.zarr")
    assert store.n_partitions > 2  # copies of one structure land in different partitions
    return rows, store


def _by_source(store: Store, name: str) -> dict[int, dict]:
    """Per source index: ``values`` {atom: row} and ``pairs`` {(atom, F): (vectors, dG/dr)}."""
    out: dict[int, dict] = {}
    for p in range(store.n_partitions):
        offsets = store.read_partition(p).offsets
        source = store.partition_source_indices(p)
        structure = np.repeat(np.arange(len(source)), np.diff(offsets))
        for k in source.tolist():
            out[k] = {"values": {}, "pairs": {}}
        for arrays in store.read_features(p, name).values():
            for row, a in enumerate(arrays["atom_index"].tolist()):
                s = structure[a]
                out[source[s]]["values"][a - offsets[s]] = arrays["values"][row]
            for f in {key.split("/")[1] for key in arrays if key.startswith("d/")}:
                first = arrays[f"d/{f}/pair_first"]
                for a in np.unique(first).tolist():
                    s, mine = structure[a], first == a
                    block = (arrays[f"d/{f}/vectors"][mine], arrays[f"d/{f}/dG_dr"][mine])
                    out[source[s]]["pairs"][(a - offsets[s], f)] = block
    return out


@pytest.mark.parametrize("name", ["acsf", "neighbor_sum"])
def test_every_copy_has_the_rows_of_its_original(featurized, name: str) -> None:  # noqa: ANN001
    rows, store = featurized
    found = _by_source(store, name)
    first = {c.original: k for k, c in reversed(list(enumerate(rows)))}
    for k, copy in enumerate(rows):
        original = rows[first[copy.original]]
        ours, theirs = found[k], found[first[copy.original]]
        image = image_of(original.atoms, copy)
        where = f"{copy.original}/{copy.name}"
        assert sorted(ours["values"]) == list(range(len(copy.atoms))), where
        for a, values in ours["values"].items():
            np.testing.assert_allclose(values, theirs["values"][image[a]], rtol=1e-12,
                                       atol=1e-13, err_msg=where)  # fmt: skip
        assert {(image[a], f) for a, f in ours["pairs"]} == set(theirs["pairs"]), where
        for (a, f), (vectors, dg) in ours["pairs"].items():
            their_vectors, their_dg = theirs["pairs"][(image[a], f)]
            back = vectors.astype(np.float64) @ copy.rotation  # into the original's frame
            gap = np.linalg.norm(back[:, None] - their_vectors[None], axis=-1)
            match = gap.argmin(1)
            assert len(set(match.tolist())) == len(match) == len(their_vectors), where
            assert gap[np.arange(len(match)), match].max() < 1e-5, where
            scale = np.abs(their_dg).max()
            np.testing.assert_allclose(dg.astype(np.float64) @ copy.rotation, their_dg[match],
                                       rtol=0, atol=1e-6 * scale, err_msg=where)  # fmt: skip
