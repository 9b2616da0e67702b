import numpy as np
import pytest

from dparallel.datasets import generate_emt_cu
from dparallel.descriptors import ACSF, NeighborSum
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.errors import DescriptorError
from dparallel.types import StructureBatch


def _set() -> DescriptorSet:
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.5, 0.0)], narrow=[(0.01, 1.0, 1.0, 0.0)])
    return DescriptorSet(
        acsf=acsf, neighbor_sum=NeighborSum(["Cu"], r_cut=5.0, n_sensitivities=4), derivatives=True
    )


def test_each_descriptor_sees_only_its_own_cutoff():
    batch = StructureBatch.from_ase(generate_emt_cu(3, seed=1))
    dset = _set()
    out = dset.compute(batch)
    assert dset.r_cut == 5.0
    for name, descriptor in dset.descriptors().items():
        direct = descriptor.compute(batch, derivatives=True)["Cu"]
        stored = out[name]["Cu"]
        np.testing.assert_array_equal(stored["values"], direct.values.numpy())
        np.testing.assert_array_equal(stored["d/Cu/dG_dr"], direct.pairs["Cu"].dG_dr.numpy())
        assert stored["d/Cu/vectors"].shape == (stored["d/Cu/pair_first"].shape[0], 3)
        assert np.all(np.linalg.norm(stored["d/Cu/vectors"], axis=1) < descriptor.r_cut)


def test_round_trip_and_validation():
    dset = _set()
    again = DescriptorSet.from_dict(dset.to_dict())
    assert again.to_dict() == dset.to_dict()
    with pytest.raises(DescriptorError, match="needs ACSF, NeighborSum or both"):
        DescriptorSet()
    with pytest.raises(DescriptorError, match="dtype must be"):
        DescriptorSet(acsf=dset.acsf, dtype="float16")
