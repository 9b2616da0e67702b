"""Store format 3 for per-pair derivatives: float32, radial columns as one number,
feature-major, all columns of a block in one array.

The reference is the float64 block as computed (ACSF by autograd-checked kernels, and a
synthetic block whose radial columns are built as s · r̂ by hand), compared within float32
rounding; format-1 and format-2 stores are read as they were written and refused for writing.
"""

from __future__ import annotations

import ase.io
import numpy as np
import pytest
import zarr

from dparallel.datasets import generate_emt_cu
from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.errors import StoreError
from dparallel.io import open_source
from dparallel.store import create_store, open_store
from dparallel.store._derivatives import decode_pairs, encode_pairs
from dparallel.store.plan import plan_partitions
from dparallel.types import StructureBatch

F32 = np.finfo(np.float32).eps


@pytest.fixture(autouse=True, params=["numpy", "compiled"])
def decode_path(request, monkeypatch):  # noqa: ANN001, ANN201
    """Every test runs with both ways :func:`decode_pairs` rebuilds dG/dr: numpy (small
    blocks) and the compiled pass (large blocks, and every block once it is loaded)."""
    from dparallel.store import _derivatives

    jit = {k: v for k, v in _derivatives._JIT.items() if k != "_unsplit"}
    monkeypatch.setattr(_derivatives, "_JIT", jit)
    big = request.param == "numpy"
    monkeypatch.setattr(_derivatives, "COMPILED_DECODE_BYTES", 1 << 62 if big else 0)
    return request.param


def _block(rng: np.random.Generator, n_pairs: int, radial: list[int], n_cols: int) -> dict:
    vectors = rng.normal(size=(n_pairs, 3)) * 2.0  # (P, 3) Å
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    dG_dr = rng.normal(size=(n_pairs, n_cols, 3))  # generic (angular) columns
    for f in radial:
        dG_dr[:, f, :] = rng.normal(size=(n_pairs, 1)) * unit  # ∂G/∂r_ij ∥ r_ij
    return {
        "pair_first": np.sort(rng.integers(0, 50, n_pairs)),
        "pair_second": rng.integers(0, 50, n_pairs),
        "center": np.sort(rng.integers(0, 40, n_pairs)),
        "vectors": vectors,
        "feature_index": np.arange(n_cols, dtype=np.int64) + 3,
        "dG_dr": dG_dr,
    }


def _assert_float32_close(got: np.ndarray, ref: np.ndarray) -> None:
    scale = np.abs(ref).max(axis=-1, keepdims=True) + 1e-300  # per pair and column
    assert got.dtype == np.float32
    assert np.all(np.abs(got - ref) <= 4 * F32 * scale)


def test_radial_columns_found_and_block_round_trips(rng):
    block = _block(rng, 500, radial=[0, 1, 4], n_cols=6)
    block["dG_dr"][7, 5, :] = 0.0  # a zero vector is parallel to anything: still angular
    stored = encode_pairs(block)
    assert np.flatnonzero(stored["radial"]).tolist() == [0, 1, 4]
    # s of columns 0, 1, 4, then x, y, z rows of columns 2, 3, 5
    assert stored["dG_dr_split"].shape == (3 + 3 * 3, 500)
    unit = block["vectors"] / np.linalg.norm(block["vectors"], axis=1, keepdims=True)
    s_ref = np.einsum("pfc,pc->fp", block["dG_dr"][:, [0, 1, 4]], unit)
    assert np.allclose(stored["dG_dr_split"][:3], s_ref, rtol=1e-6, atol=1e-6)
    ang_ref = block["dG_dr"][:, [2, 3, 5]].transpose(1, 2, 0).reshape(9, 500)
    assert np.array_equal(stored["dG_dr_split"][3:], ang_ref.astype(np.float32))
    assert stored["pairs"].dtype == np.int32 and len(stored) == 5
    back = decode_pairs(stored)
    _assert_float32_close(back["dG_dr"], block["dG_dr"])
    _assert_float32_close(back["vectors"], block["vectors"])
    for name in ("pair_first", "pair_second", "center", "feature_index"):
        assert np.array_equal(back[name], block[name])


@pytest.mark.parametrize("pair", [0, 63, 64, 123, 299])  # before, at and after the probe
def test_a_column_radial_for_all_but_one_pair_is_stored_whole(rng, pair):
    block = _block(rng, 300, radial=[0, 1, 3], n_cols=4)
    unit = block["vectors"][pair] / np.linalg.norm(block["vectors"][pair])
    tilt = np.cross(unit, [0.0, 0.0, 1.0])
    block["dG_dr"][pair, 1, :] += 1e-5 * np.linalg.norm(block["dG_dr"][pair, 1]) * tilt
    stored = encode_pairs(block)
    assert np.flatnonzero(stored["radial"]).tolist() == [0, 3]
    _assert_float32_close(decode_pairs(stored)["dG_dr"], block["dG_dr"])


def test_no_pairs(rng):
    block = _block(rng, 0, radial=[], n_cols=4)
    back = decode_pairs(encode_pairs(block))
    assert back["dG_dr"].shape == (0, 4, 3) and back["vectors"].shape == (0, 3)


def test_acsf_radial_functions_are_the_radial_columns():
    """On real ACSF output: the type-2 columns, and only they, go to one number per pair."""
    acsf = ACSF.uniform(
        ["Cu"], r_cut=4.5, radial=[(0.5, 0.0), (1.0, 2.0)], narrow=[(0.01, 1.0, 1.0, 0.0)]
    )
    batch = StructureBatch.from_ase(generate_emt_cu(3, seed=2))
    out = DescriptorSet(acsf=acsf, derivatives=True).compute(batch)["acsf"]["Cu"]
    block = {k.split("/", 2)[2]: v for k, v in out.items() if k.startswith("d/Cu/")}
    stored = encode_pairs(block)
    assert np.flatnonzero(stored["radial"]).tolist() == [0, 1]
    _assert_float32_close(decode_pairs(stored)["dG_dr"], block["dG_dr"])


def test_float32_kernel_output_stores_as_the_float64_one():
    """What featurize tasks do: dG/dr written by the kernel in float32 (``derivative_dtype``)
    finds the same radial columns and stores within float32 rounding of the float64 block
    (incl. functions whose derivatives are tiny: no subnormal digits decide radial-ness)."""
    acsf = ACSF.uniform(
        ["Cu"],
        r_cut=6.0,
        radial=[(0.5, 0.0), (1.0, 2.0), (15.0, 0.0)],  # η = 15 Å⁻²: f32-subnormal at ~2.5 Å
        narrow=[(0.01, 1.0, 1.0, 0.0)],
    )
    batch = StructureBatch.from_ase(generate_emt_cu(3, seed=4))
    dset = DescriptorSet(acsf=acsf, derivatives=True)
    ref = dset.compute(batch)["acsf"]["Cu"]
    got = dset.compute(batch, derivative_dtype="float32")["acsf"]["Cu"]
    assert np.array_equal(got["values"], ref["values"])  # values stay float64, untouched
    assert got["d/Cu/dG_dr"].dtype == np.float32
    assert np.array_equal(got["d/Cu/dG_dr"], ref["d/Cu/dG_dr"].astype(np.float32))
    blocks = [
        {k.split("/", 2)[2]: v for k, v in out.items() if k.startswith("d/Cu/")}
        for out in (ref, got)
    ]
    stored = [encode_pairs(b) for b in blocks]
    assert np.flatnonzero(stored[1]["radial"]).tolist() == [0, 1, 2]
    assert np.array_equal(stored[0]["radial"], stored[1]["radial"])
    back = decode_pairs(stored[1])["dG_dr"]
    tiny = np.abs(blocks[0]["dG_dr"]).max(axis=-1) < np.finfo(np.float32).tiny  # underflow
    _assert_float32_close(back[~tiny], blocks[0]["dG_dr"][~tiny])
    assert np.all(np.abs(back[tiny]) < np.finfo(np.float32).tiny)


def test_missing_array_says_refeaturize(rng):
    stored = encode_pairs(_block(rng, 10, radial=[0], n_cols=2))
    del stored["dG_dr_split"]
    with pytest.raises(StoreError, match="re-featurize"):
        decode_pairs(stored)


def _older_store(tmp_path, version: int, derivatives: dict, n_features: int):
    """A one-partition store holding ``derivatives`` as the Cu-Cu block's arrays, then
    marked as format ``version`` (its layout as that format wrote it)."""
    frames = generate_emt_cu(4, seed=3)
    ase.io.write(tmp_path / "cu.xyz", frames, format="extxyz")
    src = open_source(tmp_path / "cu.xyz")
    store = create_store(
        tmp_path / "s.zarr",
        source_fingerprint=src.fingerprint(),
        plan=plan_partitions(src.atom_counts, 10_000),
        config={"x": 1, "features": {"acsf": {}}},  # a featurized store's config
    )
    store.write_structures(0, src.read(0, 4), source_index=np.arange(4))
    store.write_partition_arrays(0, derivatives, group="features/acsf/Cu/d/Cu")
    values = {"values": np.ones((2, n_features)), "atom_index": np.arange(2)}
    store.write_partition_arrays(0, values, group="features/acsf/Cu")
    store.mark_done(0)
    root = zarr.open_group(str(store.path), mode="r+")
    root.attrs["dparallel"] = {**root.attrs["dparallel"], "format_version": version}
    return store.path


def test_format_1_store_reads_as_written_and_refuses_writes(tmp_path, rng):
    block = _block(rng, 20, radial=[0], n_cols=2)  # format 1: stored as computed
    path = _older_store(tmp_path, 1, block, 2)
    feats = open_store(path).read_features(0, "acsf")["Cu"]
    assert np.array_equal(feats["d/Cu/dG_dr"], block["dG_dr"])  # float64, untouched
    with pytest.raises(StoreError, match="featurize it again"):
        open_store(path, mode="r+")


def test_format_2_store_reads_its_separate_arrays_and_refuses_writes(tmp_path, rng):
    """Format 2 kept a block as six arrays (``dG_dr_radial`` (F_r, P), ``dG_dr_angular``
    (F_a, 3, P), ``feature_index`` and ``radial`` as arrays): read as before."""
    block = _block(rng, 40, radial=[0, 2], n_cols=4)
    three = encode_pairs(block)
    n_r, split = 2, three.pop("dG_dr_split")
    two = three | {"dG_dr_radial": split[:n_r], "dG_dr_angular": split[n_r:].reshape(2, 3, 40)}
    path = _older_store(tmp_path, 2, two, 4)
    feats = open_store(path).read_features(0, "acsf")["Cu"]
    _assert_float32_close(feats["d/Cu/dG_dr"], block["dG_dr"])
    assert feats["d/Cu/feature_index"].tolist() == block["feature_index"].tolist()
    with pytest.raises(StoreError, match="featurize it again"):
        open_store(path, mode="r+")


def _alloy(n: int, seed: int) -> StructureBatch:
    """Rattled fcc Cu/Au/Ni cells (three neighbour elements, ~78 neighbours within 6 Å)."""
    from ase.build import bulk

    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(n):
        atoms = bulk("Cu", "fcc", a=3.7, cubic=True).repeat((2, 2, 2))
        atoms.numbers = rng.choice([29, 79, 28], size=len(atoms))
        atoms.rattle(0.08, seed=int(rng.integers(1 << 30)))
        frames.append(atoms)
    return StructureBatch.from_ase(frames)


def test_kernel_split_layout_decodes_to_the_pair_major_derivatives():
    """What featurize tasks store: the kernel's split dG/dr (``split_derivatives``) has the
    radial (type 2) columns as s, the angular ones (types 3 and 9, separable pass included)
    as 3-vectors, and decodes within float32 rounding of the float64 pair-major output."""
    acsf = ACSF.uniform(
        ["Cu", "Au", "Ni"],
        r_cut=6.0,
        radial=[(0.5, 0.0), (1.0, 2.5)],
        narrow=[(0.01, 1.0, -1.0, 0.0), (0.02, 4.0, 1.0, 0.5)],
        wide=[(0.01, 2.0, 1.0, 0.0)],  # integer ζ: the separable pass at many neighbours
    )
    batch = _alloy(3, seed=5)
    dset = DescriptorSet(acsf=acsf, derivatives=True)
    ref = dset.compute(batch)["acsf"]
    got = dset.compute(batch, derivative_dtype="float32", split_derivatives=True)["acsf"]
    assert ref.keys() == got.keys() == {"Cu", "Au", "Ni"}
    for e, out in got.items():
        assert np.array_equal(out["values"], ref[e]["values"])
        for f in ("Cu", "Au", "Ni"):
            block = {k.split("/", 2)[2]: v for k, v in out.items() if k.startswith(f"d/{f}/")}
            assert "dG_dr" not in block and block["dG_dr_split"].dtype == np.float32
            types = [acsf.features(e)[int(c)]["type"] for c in block["feature_index"]]
            assert block["radial"].tolist() == [t == 2 for t in types]
            assert {2, 3, 9} <= set(types)
            whole = {k.split("/", 2)[2]: v for k, v in ref[e].items() if k.startswith(f"d/{f}/")}
            back = decode_pairs(encode_pairs(block))
            _assert_float32_close(back["dG_dr"], whole["dG_dr"])
            for name in ("pair_first", "pair_second", "center", "feature_index"):
                assert np.array_equal(back[name], whole[name])


def test_numpy_and_compiled_decodes_are_bitwise_equal(rng):
    """The two ways of rebuilding dG/dr give the same bits (radial columns interleaved with
    angular ones, a zero vector, a float32 rounding of r̂ in both)."""
    from dparallel.store._derivatives import _compiled, _unsplit_numpy

    n_pairs, radial, angular = 257, np.array([0, 3, 4, 7]), np.array([1, 2, 5, 6])
    s = rng.normal(size=(radial.size, n_pairs)).astype(np.float32)
    ang = rng.normal(size=(angular.size, 3, n_pairs)).astype(np.float32)
    vectors = (rng.normal(size=(n_pairs, 3)) * 3.0).astype(np.float32)
    vectors[5] = 0.0
    vectors[6] = [-0.0, 0.0, -0.0]  # signed zeros: r̂ = +0 in both
    vectors[7] = [np.nan, 1.0, 1.0]  # not r > 0: r̂ = 0 in both, as _unit says
    got = {}
    for name, fn in (("numpy", _unsplit_numpy), ("compiled", _compiled("_unsplit"))):
        got[name] = np.full((n_pairs, 8, 3), np.nan, np.float32)
        fn(s, ang, vectors, radial, angular, got[name])
    assert np.array_equal(got["numpy"].view(np.uint32), got["compiled"].view(np.uint32))
    assert not np.isnan(got["numpy"]).any() and not got["numpy"][[5, 6, 7]][:, radial].any()


def test_decoding_small_blocks_never_imports_numba(tmp_path, rng):
    """A process that reads only small blocks (a training run on a small store) is spared
    numba's import and first call; a block over the threshold loads it."""
    import subprocess
    import sys
    from pathlib import Path

    from dparallel.store import _derivatives

    np.savez(tmp_path / "b.npz", **encode_pairs(_block(rng, 400, radial=[0, 2], n_cols=5)))
    script = (
        "import sys, numpy as np\n"
        "from dparallel.store import _derivatives as d\n"
        "d.COMPILED_DECODE_BYTES = int(sys.argv[1])\n"
        "back = d.decode_pairs(dict(np.load(sys.argv[2])))\n"
        "print(back['dG_dr'].shape, 'numba' in sys.modules)\n"
    )
    root = str(Path(_derivatives.__file__).resolve().parents[2])
    for threshold, loaded in ((1 << 40, False), (0, True)):
        out = subprocess.run(
            [sys.executable, "-c", script, str(threshold), str(tmp_path / "b.npz")],
            capture_output=True, text=True, timeout=120, env={"PYTHONPATH": root, "PATH": ""},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["(400,", "5,", "3)", str(loaded)]


def _unsplit_reference(stored: dict) -> np.ndarray:
    """decode_pairs' dG/dr rebuilt with plain numpy: s · r̂ (r̂ in float64, rounded to
    float32) for the radial columns, the stored x, y, z rows for the others."""
    flags = np.asarray(stored["radial"], bool)
    n_r, n_pairs = int(flags.sum()), stored["vectors_t"].shape[1]
    cols = np.asarray(stored["dG_dr_split"], np.float32)
    v = stored["vectors_t"].T.astype(np.float64)
    dist = np.linalg.norm(v, axis=1)
    unit = (v / np.where(dist > 0, dist, 1.0)[:, None]).astype(np.float32)  # (P, 3)
    out = np.zeros((n_pairs, flags.size, 3), np.float32)
    out[:, np.flatnonzero(flags)] = cols[:n_r].T[:, :, None] * unit[:, None, :]
    ang = cols[n_r:].reshape(flags.size - n_r, 3, n_pairs)  # (F_a, 3, P)
    out[:, np.flatnonzero(~flags)] = ang.transpose(2, 0, 1)
    return out


@pytest.mark.parametrize(
    ("n_pairs", "radial", "n_cols"),
    [(0, [0], 2), (1, [0], 1), (1, [], 1), (7, [], 3), (7, [0, 1, 2], 3), (50, [1, 3], 5)],
)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_decode_equals_a_numpy_reimplementation(rng, n_pairs, radial, n_cols, index_dtype):
    """Edge cases of the compiled decode (no pairs, one column, only radial or only
    angular columns, a zero vector, non-contiguous inputs, int64 pair rows) against numpy."""
    block = _block(rng, n_pairs, radial=radial, n_cols=n_cols)
    if n_pairs:
        block["vectors"][0] = 0.0  # r̂ = 0: its radial columns decode to 0
        block["dG_dr"][0][:, :] = 0.0
    stored = encode_pairs(block)
    stored["pairs"] = stored["pairs"].astype(index_dtype)
    wide = np.zeros((stored["dG_dr_split"].shape[0], 2 * n_pairs), np.float32)
    wide[:, ::2] = stored["dG_dr_split"]
    stored["dG_dr_split"] = wide[:, ::2]  # a strided view
    wide_v = np.zeros((3, 2 * n_pairs), np.float32)
    wide_v[:, 1::2] = stored["vectors_t"]
    stored["vectors_t"] = wide_v[:, 1::2]
    back = decode_pairs(stored)
    assert np.array_equal(back["dG_dr"], _unsplit_reference(stored))
    assert back["pair_first"].dtype == index_dtype
    assert np.array_equal(back["center"], block["center"])


@pytest.mark.parametrize(
    "damage",
    ["fewer s pairs", "fewer s rows", "fewer index pairs", "one more flag", "short feature index"],
)
def test_a_block_whose_arrays_disagree_in_shape_is_refused(rng, damage):
    """The compiled decode reads without bounds checks: a damaged or foreign block whose
    arrays do not fit its pair count and radial flags is refused, never read past its end
    (it decoded to memory beyond the array, silently)."""
    stored = encode_pairs(_block(rng, 6, radial=[0, 1], n_cols=2))  # only radial columns
    if damage == "fewer s pairs":
        stored["dG_dr_split"] = stored["dG_dr_split"][:, :4]
    elif damage == "fewer s rows":
        stored["dG_dr_split"] = stored["dG_dr_split"][:1]
    elif damage == "fewer index pairs":
        stored["pairs"] = stored["pairs"][:, :5]
    elif damage == "one more flag":
        stored["radial"] = np.array([True, True, True])
    else:
        stored["feature_index"] = stored["feature_index"][:1]
    with pytest.raises(StoreError, match="re-featurize") as info:
        decode_pairs(stored)
    assert "6 pairs" in str(info.value) or "has a misshapen array" in str(info.value)


def test_encoding_a_split_block_takes_no_more_than_what_it_stores(rng):
    """A task's write encodes each block's int64 rows and float64 vectors straight into
    the stored int32 (3, P) and float32 (3, P): no (3, P) int64 stack and float32 copies
    besides (2.5× the stored bytes at once, tracemalloc); the bytes are numpy's casts."""
    import tracemalloc

    n = 200_000
    block = _block(rng, 1, radial=[], n_cols=1)
    block |= {
        "pair_first": np.sort(rng.integers(0, 5_000, n)),
        "pair_second": rng.integers(0, 5_000, n),
        "center": np.sort(rng.integers(0, 4_000, n)),
        "vectors": rng.normal(size=(n, 3)) * 2.0,
        "radial": np.array([True]),
        "dG_dr_split": rng.normal(size=(1, n)).astype(np.float32),
    }
    del block["dG_dr"]
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        stored = encode_pairs(block)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    own = stored["pairs"].nbytes + stored["vectors_t"].nbytes
    assert peak < 1.2 * own, peak / own
    names = ("pair_first", "pair_second", "center")
    assert np.array_equal(stored["pairs"], np.stack([block[k] for k in names]).astype(np.int32))
    assert stored["pairs"].dtype == np.int32 and stored["vectors_t"].flags.c_contiguous
    assert np.array_equal(stored["vectors_t"], block["vectors"].T.astype(np.float32))
