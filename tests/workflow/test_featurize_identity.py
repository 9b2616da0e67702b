"""One dataset, several ways in: extxyz, extxyz.gz and n2p2 input.data (written from ASE's
reading of the extxyz), torch threads per task, ingest: the same store arrays, bit for bit.
(Worker counts, partition sizes, a ``dask scheduler`` cluster and a resumed client are in
test_featurize.py.)"""

from __future__ import annotations

import gzip
from typing import TYPE_CHECKING

import ase.io
import numpy as np
import pytest
from same_arrays import assert_same_arrays

from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.n2p2.input_data import write_input_data
from dparallel.store import open_store
from dparallel.workflow.featurize import FeaturizeOptions, featurize
from dparallel.workflow.ingest import IngestOptions, ingest

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def _descriptor_set() -> DescriptorSet:
    """ACSF (numba kernels) and neighbor sums (torch: what a task's torch threads run)."""
    from dparallel.descriptors import ACSF, NeighborSum

    acsf = ACSF.uniform(
        elements=["Cu"], r_cut=4.5, cutoff="cos", radial=[(0.5, 0.0), (1.0, 2.5)],
        narrow=[(0.02, 1.0, 1.0, 0.0)], wide=[(0.02, 2.0, -1.0, 0.0)],
    )  # fmt: skip
    sums = NeighborSum(["Cu"], r_cut=4.5, n_sensitivities=6, r_min=2.0)
    dset = DescriptorSet(acsf=acsf, neighbor_sum=sums, derivatives=True)
    assert dset.uses_torch  # so the "t2" case below runs torch on 2 threads
    return dset


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0") as c,
        Client(c) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from dparallel.datasets import write_emt_cu

    return write_emt_cu(tmp_path_factory.mktemp("data") / "cu.extxyz", n_structures=24, seed=7)


def _featurize(source: Path, out: Path, client, threads: int = 1) -> Path:  # noqa: ANN001
    options = FeaturizeOptions(partition_atoms=150, client=client, torch_threads=threads)
    featurize(source, out, _descriptor_set(), options)
    return out


def test_compressed_n2p2_and_more_threads_give_the_stores_arrays(dataset, client, tmp_path):
    reference = _featurize(dataset, tmp_path / "ref.zarr", client)
    assert open_store(reference).n_partitions > 2
    packed = tmp_path / "cu.extxyz.gz"
    packed.write_bytes(gzip.compress(dataset.read_bytes()))
    n2p2 = write_input_data(tmp_path / "input.data", ase.io.read(dataset, ":"))
    assert n2p2.read_text().startswith("begin")
    for name, source, threads in [("gz", packed, 1), ("n2p2", n2p2, 1), ("t2", dataset, 2)]:
        out = _featurize(source, tmp_path / f"{name}.zarr", client, threads)
        assert_same_arrays(reference, out)
        assert open_store(out).attrs["statistics"] == open_store(reference).attrs["statistics"]


def test_ingest_stores_the_structures_featurize_stores(dataset, client, tmp_path):
    featurized = open_store(_featurize(dataset, tmp_path / "f.zarr", client))
    for size in (150, None):  # featurize's partitions, and ingest's one default partition
        path = tmp_path / f"ingested-{size}.zarr"
        ingest(dataset, path, IngestOptions(partition_atoms=size))
        ingested = open_store(path)
        assert ingested.read_structures().equals(featurized.read_structures())
        assert np.array_equal(ingested.source_indices(), featurized.source_indices())
