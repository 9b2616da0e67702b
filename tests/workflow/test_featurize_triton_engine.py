"""The GPU featurize engine (ACSF on the Triton kernel) against the CPU task's arrays.

Without a CUDA device the kernel runs in Triton's interpreter on ``device="cpu"``, chosen
(``TRITON_INTERPRET=1``) before triton is first imported (``triton_interpreter``); if
triton was imported earlier in the session, the module runs again in a child process.
The interpreter is slow: the structures are small (≤ 6 atoms each).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import ase
import numpy as np
import pytest

from dparallel.descriptors import ACSF
from dparallel.descriptors._acsf_backends import numba_available
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.neighbors import neighbor_list
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dparallel.neighbors import Neighbors

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parents[1] / "kernels"))  # the interpreter helper
import triton_interpreter as ti  # needs torch and the path above

ti.skip_without_triton()
pytestmark = pytest.mark.skipif(not numba_available(), reason="the CPU route needs numba")


@pytest.fixture(scope="module")
def in_process() -> Iterator[bool]:
    """Whether the kernels run here (TRITON_INTERPRET set now if needed; restored after)."""
    yield ti.setup()
    ti.restore()


@pytest.fixture(autouse=True)
def _kernel_runs_here(request: pytest.FixtureRequest, in_process: bool) -> None:
    ti.skip_unless_here(request, in_process)


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _batch(seed: int, numbers: list[int]) -> StructureBatch:
    """A small periodic (triclinic) cell and a small molecule of the given elements."""
    rng = np.random.default_rng(seed)
    cell = np.diag(rng.uniform(2.8, 3.4, 3)) + rng.uniform(-0.3, 0.3, (3, 3)) * (1 - np.eye(3))
    periodic = ase.Atoms(
        numbers=rng.choice(numbers, 6), scaled_positions=rng.random((6, 3)), cell=cell, pbc=True
    )
    molecule = ase.Atoms(numbers=rng.choice(numbers, 5), positions=rng.normal(size=(5, 3)))
    return StructureBatch.from_ase([periodic, molecule])


def _acsf(elements: list[str], r_cut: float) -> ACSF:
    return ACSF.uniform(
        elements, r_cut=r_cut, cutoff="tanh", radial=[(0.5, 0.0), (1.0, 1.2)],
        narrow=[(0.05, 1.0, -1.0, 0.0)], wide=[(0.05, 2.0, 1.0, 0.3)],
    )  # fmt: skip


def _within_one_ulp(actual: np.ndarray, expected: np.ndarray) -> None:
    """float32 arrays that are float64 results within 1e-12 (of the array's largest
    entry) rounded once: equal, or apart by one float32 unit in the last place (an entry
    whose float64 values differ on either side of a rounding boundary) plus that 1e-12."""
    assert actual.dtype == expected.dtype == np.float32
    gap = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    ulp = np.spacing(np.maximum(np.abs(actual), np.abs(expected))).astype(np.float64)
    slack = 1e-12 * max(1.0, float(np.abs(expected).max(initial=0.0)))
    assert np.all(gap <= ulp + slack), float(gap.max(initial=0.0))


def _close(actual: np.ndarray, expected: np.ndarray, dtype: str) -> None:
    """Values or dG/dr of a ``dtype`` set as close as the two kernels agree.

    float64 inputs: both compute in float64 and round once, so float64 values agree
    within 1e-12 and float32 dG/dr within one float32 ulp. float32 inputs (pair
    vectors and distances rounded separately, so a distance is not exactly its vector's
    norm, and the kernels use one or the other in different places): within 1e-6.
    """
    if dtype == "float64" and actual.dtype == np.float32:
        _within_one_ulp(actual, expected)
        return
    rtol = 1e-12 if dtype == "float64" else 1e-6
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def _same_as_cpu(batch: StructureBatch, dset: DescriptorSet) -> None:
    """Every array of the engine's result as task_descriptors' on the CPU."""
    from dparallel.workflow.featurize_task import task_descriptors, triton_descriptors

    nb: Neighbors = neighbor_list(batch, dset.r_cut)
    cpu = task_descriptors(batch, dset, nb)
    got = triton_descriptors(batch, dset, nb, _device())
    assert got is not None
    assert got.keys() == cpu.keys() == {"acsf"}
    assert got["acsf"].keys() == cpu["acsf"].keys()
    n_derivative_keys = 0
    for element, expected in cpu["acsf"].items():
        actual = got["acsf"][element]
        assert actual.keys() == expected.keys(), element
        for key, want in expected.items():
            have = actual[key]
            assert isinstance(have, np.ndarray), key
            assert (have.dtype, have.shape) == (want.dtype, want.shape), (element, key)
            n_derivative_keys += key.endswith("dG_dr_split")
            if key.endswith("dG_dr_split") or key == "values":
                _close(have, want, dset.dtype)
            else:  # indices, radial flags, pair vectors (inputs, passed through)
                np.testing.assert_array_equal(have, want, err_msg=f"{element} {key}")
    assert (n_derivative_keys > 0) == dset.derivatives


@pytest.mark.parametrize("derivatives", [True, False])
def test_water_as_on_the_cpu(derivatives: bool) -> None:
    dset = DescriptorSet(acsf=_acsf(["H", "O"], 3.0), derivatives=derivatives)
    _same_as_cpu(_batch(1, [1, 8]), dset)


@pytest.mark.parametrize("derivatives", [True, False])
def test_cuau_as_on_the_cpu(derivatives: bool) -> None:
    dset = DescriptorSet(acsf=_acsf(["Cu", "Au"], 3.2), derivatives=derivatives)
    _same_as_cpu(_batch(2, [29, 79]), dset)


def test_float32_set_and_an_element_absent_as_on_the_cpu() -> None:
    """dtype float32, and a set element (Au) with no atoms in the batch."""
    dset = DescriptorSet(acsf=_acsf(["Cu", "Au"], 3.2), derivatives=True, dtype="float32")
    _same_as_cpu(_batch(3, [29]), dset)


def test_declines_what_it_cannot_take(monkeypatch: pytest.MonkeyPatch) -> None:
    from dparallel.descriptors.neighbor_sum import NeighborSum
    from dparallel.workflow.featurize_task import triton_descriptors

    batch = _batch(4, [1, 8])
    acsf = _acsf(["H", "O"], 3.0)
    nb = neighbor_list(batch, 3.0)
    sums = NeighborSum(["H", "O"], r_cut=3.0, n_sensitivities=4, r_min=0.7)
    for dset in (
        DescriptorSet(neighbor_sum=sums),
        DescriptorSet(acsf=acsf, neighbor_sum=sums),
    ):
        assert triton_descriptors(batch, dset, nb, _device()) is None
    dset = DescriptorSet(acsf=acsf, derivatives=True)
    other = "meta" if _device() == "cuda" else "cuda"  # a device the kernel cannot run on
    assert triton_descriptors(batch, dset, nb, other) is None
    real = importlib.util.find_spec

    def without_triton(name: str, *args: object) -> object:
        return None if name == "triton" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_triton)
    assert triton_descriptors(batch, dset, nb, _device()) is None


def test_out_of_device_memory_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import torch

    from dparallel.workflow.featurize_task import triton_descriptors

    def full(*args: object, **kwargs: object) -> None:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(ACSF, "compute_arrays", full)
    batch = _batch(6, [1, 8])
    dset = DescriptorSet(acsf=_acsf(["H", "O"], 3.0), derivatives=True)
    with caplog.at_level("WARNING", logger="dparallel.workflow.featurize_task"):
        assert triton_descriptors(batch, dset, neighbor_list(batch, 3.0), _device()) is None
    assert "out of memory" in caplog.text and "on the CPU" in caplog.text


def test_registered_and_taken_by_the_device_hook() -> None:
    from dparallel.workflow.featurize_task import (
        DEVICE_ENGINES,
        device_descriptors,
        triton_descriptors,
    )

    assert DEVICE_ENGINES["triton"] is triton_descriptors
    batch = _batch(5, [1, 8])
    dset = DescriptorSet(acsf=_acsf(["H", "O"], 3.0), derivatives=True)
    nb = neighbor_list(batch, dset.r_cut)
    found = device_descriptors(batch, dset, nb, _device())
    assert found is not None
    expected = triton_descriptors(batch, dset, nb, _device())
    assert expected is not None
    for element, arrays in expected["acsf"].items():
        for key, value in arrays.items():
            np.testing.assert_array_equal(found["acsf"][element][key], value)


def test_module_in_child_process(in_process: bool) -> None:
    ti.module_in_child(__file__, in_process)
