"""Arrays written straight to the files (store/_direct.py) are what zarr itself writes.

The reference is zarr's own API: the same values through ``create_array`` + ``setitem``
give the same metadata document and read back the same, through zarr and xarray.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import BloscCodec

from dparallel.store._direct import (
    group_document,
    read_array_metadata,
    writable,
    write_array,
    write_chunk,
    write_fill_chunk,
    write_group,
)
from dparallel.store._layout import _NUMERIC_COMPRESSORS, CHUNK_KEYS

ZSTD = (zarr.codecs.ZstdCodec(level=1),)
CASES = {
    "float32 3-d": np.arange(2 * 3 * 7, dtype=np.float32).reshape(2, 3, 7) / 3,
    "float64 2-d": np.random.default_rng(0).normal(size=(5, 4)),
    "int32": np.arange(-5, 12, dtype=np.int32).reshape(1, 17),
    "int64": np.arange(9, dtype=np.int64) * 10**12,
    "uint8": np.arange(200, dtype=np.uint8),
    "bool": np.array([True, False, True]),
    "scalar": np.array(2.5),
    "empty": np.zeros((3, 0), np.float32),
}


def _zarr_reference(path, values, compressors, dims):
    group = zarr.open_group(str(path.parent), mode="a")
    array = group.create_array(
        path.name,
        shape=values.shape,
        dtype=values.dtype,
        chunks=tuple(max(1, s) for s in values.shape),
        compressors=compressors,
        chunk_key_encoding=CHUNK_KEYS,
        dimension_names=dims,
    )
    array[...] = values


@pytest.mark.parametrize("compressors", [_NUMERIC_COMPRESSORS, None], ids=["lz4", "raw"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_an_array_is_the_document_and_values_zarr_writes(tmp_path, case, compressors):
    values = CASES[case]
    dims = [f"{case[:3]}_{k}" for k in range(values.ndim)]
    assert writable(values, compressors)
    write_array(tmp_path / "ours" / "a", values, compressors, dims, CHUNK_KEYS)
    _zarr_reference(tmp_path / "zarr" / "a", values, compressors, dims)
    ours, theirs = (
        json.loads((tmp_path / w / "a" / "zarr.json").read_text()) for w in ("ours", "zarr")
    )
    assert ours == theirs
    got = zarr.open_array(str(tmp_path / "ours" / "a"), mode="r")[...]
    assert got.dtype == values.dtype and np.array_equal(got, values)
    files = sorted(p.name for p in (tmp_path / "ours" / "a").iterdir())
    assert files == (
        ["zarr.json"]
        if 0 in values.shape
        else sorted(["zarr.json", "c" if values.ndim == 0 else "c." + ".".join("0" * values.ndim)])
    )


def test_groups_and_arrays_open_in_xarray_with_their_attributes(tmp_path):
    write_group(tmp_path / "g", {"feature_index": [3, 1], "radial": [True, False]})
    write_array(
        tmp_path / "g" / "x", CASES["float64 2-d"], _NUMERIC_COMPRESSORS, ["p", "f"], CHUNK_KEYS
    )
    write_group(tmp_path / "g", {"other": 1})  # an existing group is left as it is
    ds = xr.open_zarr(str(tmp_path / "g"), consolidated=False)
    assert ds.attrs == {"feature_index": [3, 1], "radial": [True, False]}
    assert ds["x"].dims == ("p", "f")
    np.testing.assert_array_equal(ds["x"].values, CASES["float64 2-d"])


@pytest.mark.parametrize(
    "attributes",
    [
        None,
        {},
        {"report": {"seconds": 0.25, "stats": {"Cu": {"min": [-1e-300, 2.5e17], "n": 10**20}}}},
        {"odd": [float("nan"), float("inf"), -float("inf"), -0.0, True, None, "é ✓ \\n"]},
        {"feature_index": (3, 1), "radial": [[True, False], []], "z": {"b": 1, "a": 2}},
    ],
)
def test_a_group_document_is_what_zarr_writes_without_zarrs_deep_copy(
    tmp_path, monkeypatch, attributes
):
    from zarr.core import group as zarr_group

    from dparallel.store import _batch

    g = zarr.open_group(tmp_path / "ref.zarr", mode="w", zarr_format=3)
    g.attrs.update(attributes or {})
    reference = (tmp_path / "ref.zarr" / "zarr.json").read_bytes()
    assert group_document(attributes) == reference
    assert _batch.group_item("parts/0", attributes) == ("parts/0/zarr.json", reference)

    def no_deep_copy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("dataclasses.asdict: a deep copy of every attribute")

    monkeypatch.setattr(zarr_group, "asdict", no_deep_copy)
    assert _batch.group_item("parts/0", attributes)[1] == reference
    write_group(tmp_path / "g", attributes)
    assert (tmp_path / "g" / "zarr.json").read_bytes() == reference


def test_what_is_not_certain_to_match_zarr_is_refused(tmp_path):
    assert not writable(np.array(["a", "b"]), None)  # strings
    assert not writable(np.arange(3, dtype=">i4"), None)  # big-endian
    assert not writable(np.arange(3.0), ZSTD)  # another compressor
    assert not writable(np.arange(3.0), (BloscCodec(), BloscCodec()))
    _zarr_reference(tmp_path / "z" / "a", np.zeros((4, 3)), ZSTD, ["r", "c"])
    meta = read_array_metadata(tmp_path / "z" / "a")
    assert meta is not None and read_array_metadata(tmp_path / "z") is None  # a group
    assert not write_chunk(tmp_path / "z" / "a", meta, (0, 0), np.ones((4, 3)))  # zstd
    assert not any(p.name.startswith("c") for p in (tmp_path / "z" / "a").iterdir())


def test_a_chunk_of_a_many_chunk_array_is_written_where_zarr_reads_it(tmp_path):
    path = tmp_path / "z" / "rows"
    group = zarr.open_group(str(path.parent), mode="a")
    group.create_array(
        path.name, shape=(12, 3), chunks=(4, 3), dtype=np.float64, fill_value=np.nan,
        compressors=_NUMERIC_COMPRESSORS, chunk_key_encoding=CHUNK_KEYS,
    )  # fmt: skip
    meta = read_array_metadata(path)
    block = np.arange(12.0).reshape(4, 3)
    assert write_chunk(path, meta, (1, 0), block)
    assert not write_chunk(path, meta, (2, 0), block[:3])  # not a whole chunk
    assert not write_chunk(path, meta, (2, 0), block.astype(np.float32))  # another dtype
    got = zarr.open_array(str(path), mode="r")[...]
    assert np.array_equal(got[4:8], block) and np.isnan(got[:4]).all() and np.isnan(got[8:]).all()


def test_a_chunk_of_fill_strings_is_removed_as_zarr_does(tmp_path):
    path = tmp_path / "z" / "tags"
    group = zarr.open_group(str(path.parent), mode="a")
    tags = group.create_array(
        path.name, shape=(6,), chunks=(3,), dtype=str, fill_value="",
        chunk_key_encoding=CHUNK_KEYS,
    )  # fmt: skip
    tags[...] = np.array(["a", "b", "c", "d", "e", "f"], dtype=object)
    meta = read_array_metadata(path)
    assert not write_fill_chunk(path, meta, (1,), np.array(["", "x", ""], dtype=object))
    assert write_fill_chunk(path, meta, (1,), np.array(["", "", ""], dtype=object))
    assert zarr.open_array(str(path), mode="r")[...].tolist() == ["a", "b", "c", "", "", ""]


def test_a_replaced_document_is_read_anew(tmp_path):
    path = tmp_path / "a"
    write_array(path, np.zeros(3), None, ["x"], CHUNK_KEYS)
    assert read_array_metadata(path).shape == (3,)
    write_array(path, np.zeros(5), None, ["x"], CHUNK_KEYS)
    assert read_array_metadata(path).shape == (5,)
