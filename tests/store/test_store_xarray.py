"""Every group of a featurized store opens with xarray (zarr 3 ``dimension_names``)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from ase import Atoms
from ase.calculators.emt import EMT
from ase.io import write

from dparallel.descriptors import ACSF, NeighborSum
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

xr = pytest.importorskip("xarray")


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(5)
    frames = []
    for k in range(6):
        n = 5 + k
        a = Atoms(
            ["Cu", "Au"] * (n // 2) + ["Cu"] * (n % 2),
            positions=rng.uniform(0, 6.0, (n, 3)),
            cell=np.eye(3) * 6.5,
            pbc=k % 2 == 0,
        )
        a.calc = EMT()
        a.get_forces()
        frames.append(a)
    write(tmp_path / "cuau.extxyz", frames)
    descriptors = DescriptorSet(
        acsf=ACSF.uniform(
            ["Cu", "Au"],
            r_cut=4.0,
            radial=[(0.5, 0.0), (1.0, 2.5)],
            narrow=[(0.01, 1.0, -1.0, 0.0)],
        ),
        neighbor_sum=NeighborSum(["Cu", "Au"], r_cut=4.0, n_sensitivities=3),
        derivatives=True,
    )
    return featurize_in_process(
        tmp_path / "cuau.extxyz",
        tmp_path / "f.zarr",
        descriptors,
        FeaturizeOptions(partition_atoms=20),
    )


def _groups(root: zarr.Group, prefix: str = ""):
    yield prefix
    for name, child in sorted(root.groups()):
        yield from _groups(child, f"{prefix}/{name}" if prefix else name)


def test_every_group_opens_with_xarray(store):
    root = zarr.open_group(str(store.path), mode="r")
    seen = 0
    for group in _groups(root):
        node = root[group] if group else root
        ds = xr.open_zarr(str(store.path), group=group or None, consolidated=False)
        for name, arr in node.arrays():
            assert ds[name].shape == arr.shape, (group, name)
            assert len(set(ds[name].dims)) == arr.ndim, (group, name, ds[name].dims)
            seen += 1
    assert seen > 20


def test_shared_axes_share_names_and_sizes(store):
    path = str(store.path)
    s = xr.open_zarr(path, group="structures", consolidated=False)
    assert s["positions"].dims == ("atom", "xyz")
    assert s["forces"].dims == ("atom", "xyz")
    assert s["numbers"].dims == ("atom",)
    assert s["cells"].dims == ("structure", "cell_vector", "xyz")
    assert s.sizes["atom"] == store.n_partitions * store.atom_slots
    assert s.sizes["structure"] == store.n_partitions * store.structure_slots
    np.testing.assert_array_equal(
        s["positions"].values, zarr.open_array(f"{path}/structures/positions")[...]
    )
    p = xr.open_zarr(path, group="partitions", consolidated=False)
    assert p.sizes == {"partition": store.n_partitions, "atomic_number": 119}
    f = xr.open_zarr(path, group="parts/0/features/acsf/Au", consolidated=False)
    assert f["values"].dims == ("atom_Au", "feature_Au")
    assert f["atom_index"].dims == ("atom_Au",)
    d = xr.open_zarr(path, group="parts/0/features/acsf/Au/d/Cu", consolidated=False)
    # store format 3: packed pair rows, feature-major float32 (store/_derivatives.py)
    assert d["pairs"].dims == ("pair_field_Au_Cu", "pair_Au_Cu")
    assert d["vectors_t"].dims == ("xyz", "pair_Au_Cu")
    assert d["dG_dr_split"].dims == ("feature_Au_Cu_split", "pair_Au_Cu")
    # the block's feature index and radial flags are the group's attributes
    assert len(d.attrs["feature_index"]) == len(d.attrs["radial"])
    n_radial = sum(d.attrs["radial"])
    n_angular = len(d.attrs["radial"]) - n_radial
    assert d.sizes["feature_Au_Cu_split"] == n_radial + 3 * n_angular
    # the logical arrays the store reads back have the same pair count
    logical = store.read_features(0, "acsf")["Au"]
    assert d.sizes["pair_Au_Cu"] == logical["d/Cu/dG_dr"].shape[0]
