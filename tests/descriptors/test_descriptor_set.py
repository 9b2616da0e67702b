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


def _pair_order(first: np.ndarray, second: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Pairs sorted by (i, j, r_ij rounded to 1e-9 Å): one order whatever the list's."""
    r = np.round(vectors, 9)
    return np.lexsort((r[:, 2], r[:, 1], r[:, 0], second, first))


def test_each_descriptor_sees_only_its_own_cutoff():
    batch = StructureBatch.from_ase(generate_emt_cu(3, seed=1))
    dset = _set()
    out = dset.compute(batch)
    assert dset.r_cut == 5.0
    for name, descriptor in dset.descriptors().items():
        direct = descriptor.compute(batch, derivatives=True)["Cu"]
        stored = out[name]["Cu"]
        # same pairs, but a cell smaller than the cutoff lists the images of one (i, j) in
        # an order that may depend on the list's cutoff: compare pairs by (i, j, r_ij), and
        # sums to their last bits
        np.testing.assert_allclose(stored["values"], direct.values.numpy(), rtol=1e-13)
        ref, d = direct.pairs["Cu"], "d/Cu/"
        ref_order = _pair_order(ref.pair_first.numpy(), ref.pair_second.numpy(),
                                ref.vectors.numpy())  # fmt: skip
        got_order = _pair_order(stored[d + "pair_first"], stored[d + "pair_second"],
                                stored[d + "vectors"])  # fmt: skip
        np.testing.assert_allclose(
            stored[d + "dG_dr"][got_order], ref.dG_dr.numpy()[ref_order],
            rtol=1e-12, atol=1e-14,
        )  # fmt: skip
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
