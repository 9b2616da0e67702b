"""A store behind any zarr ``Store``: a ``MemoryStore`` (or an fsspec URL) holds what a
local store holds, key for key and byte for byte, and reads back the same arrays; what
only a folder has (a path, a lease, replacing a store) is a clear error elsewhere.

The local store is written by the direct-file path (store/_direct.py), the others through
zarr's API only, both by the same writers (:class:`~dparallel.store.Store`'s methods).
"""

from __future__ import annotations

import json
import logging
import re

import ase.io
import numpy as np
import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, MemoryStore

from dparallel.errors import StoreError, StoreMismatchError
from dparallel.io import open_source
from dparallel.io.synthetic import random_structures
from dparallel.store import (
    Store,
    StoreLease,
    _direct,
    _write_routes,
    create_store,
    lease_path,
    open_store,
    store_status,
)
from dparallel.store._layout import _IDENTITY_ATTRS


@pytest.fixture(scope="module")
def featurized(tmp_path_factory):
    """A featurized local store (ACSF with dG/dr, some skipped structures) and its source."""
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    tmp = tmp_path_factory.mktemp("featurized")
    rng = np.random.default_rng(24)
    frames = random_structures(14, rng, min_atoms=3, max_atoms=12, elements=(1, 6, 8))
    frames[3].info["set"] = "test"
    data = tmp / "data.xyz"
    ase.io.write(data, frames, format="extxyz")
    acsf = ACSF.uniform(["H", "C", "O"], r_cut=3.0, cutoff="cos", radial=[(0.5, 0.0)],
                        narrow=[(0.1, 1.0, 1.0, 0.0)], wide=[])  # fmt: skip
    dset = DescriptorSet(acsf=acsf, derivatives=True)
    store = featurize_in_process(data, tmp / "f.zarr", dset, FeaturizeOptions(partition_atoms=40))
    assert store.is_complete and store.n_partitions > 2
    return store, data


def _fill(target, reference: Store, data) -> Store:
    """A store at ``target`` with ``reference``'s identity, written partition by partition
    by the store's writers with the reference's content (and a few extra arrays)."""
    attrs = reference.attrs
    source = open_source(data)
    store = create_store(
        target,
        source_fingerprint=attrs["source"],
        plan=reference.plan,
        config=attrs["config"],
    )
    store.update_attrs({k: v for k, v in attrs.items() if k not in _IDENTITY_ATTRS})
    store.create_atom_array("charge", (2,), np.float32, attributes={"unit": "e"})
    for p in range(store.n_partitions):
        start, stop = store.partition_range(p)
        read = source.read_checked(start, stop)
        store.write_structures(p, read.batch, source_index=read.indices)
        store.record_skipped([(start, "a reason")] if p == 1 else [])
        store.write_features(p, {"acsf": reference.read_features(p, "acsf")})
        charges = np.arange(read.batch.n_atoms * 2, dtype=np.float32).reshape(-1, 2) + p
        store.write_atom_array("charge", p, charges)
        extra = {"pairs": np.full((p + 2, 2), p), "names": np.array(["H", "O"][: p % 2 + 1])}
        store.write_partition_arrays(p, extra, group="nbr/deep")
        store.mark_done(p, reference.report(p))
    return store


def _contents(zarr_store) -> dict[str, bytes]:
    """Every key of a zarr store and its bytes; the root document without its time."""

    async def collect() -> dict[str, bytes]:
        out = {}
        async for key in zarr_store.list():
            value = await zarr_store.get(key, prototype=default_buffer_prototype())
            out[key] = value.to_bytes()
        return out

    out = sync(collect())
    root = json.loads(out.pop("zarr.json"))
    del root["attributes"]["dparallel"]["created"]
    del root["attributes"]["dparallel"]["identity"]  # a new one with every store made
    out["zarr.json"] = json.dumps(root, sort_keys=True).encode()
    return out


def _assert_same_reads(got: Store, want: Store) -> None:
    """``got`` reads as ``want`` (both written by :func:`_fill`): structures, skipped
    records, reports, atom and partition arrays, and features bitwise."""
    assert got.n_structures == want.n_structures and got.elements == want.elements
    assert got.read_structures().equals(want.read_structures())
    np.testing.assert_array_equal(got.source_indices(), want.source_indices())
    assert got.skipped() == want.skipped() == [(want.partition_range(1)[0], "a reason")]
    np.testing.assert_array_equal(
        got.read_atom_array("charge", 0, got.n_structures),
        want.read_atom_array("charge", 0, want.n_structures),
    )
    for p in range(want.n_partitions):
        assert got.report(p) == want.report(p)
        for group in ("nbr/deep", None):
            a, b = got.read_partition_arrays(p, group), want.read_partition_arrays(p, group)
            assert a.keys() == b.keys()
            assert all(np.array_equal(a[k], b[k]) for k in a)
        a, b = got.read_features(p, "acsf"), want.read_features(p, "acsf")
        assert a.keys() == b.keys() and any(k.startswith("d/") for e in a for k in a[e])
        for e in a:
            assert a[e].keys() == b[e].keys()
            for k in a[e]:
                assert a[e][k].dtype == b[e][k].dtype
                assert a[e][k].tobytes() == b[e][k].tobytes(), (p, e, k)  # bitwise


def test_a_memory_store_holds_and_reads_what_the_direct_files_do(featurized, tmp_path, monkeypatch):
    reference, data = featurized
    direct_writes: list[str] = []
    for name in ("write_array", "write_chunk"):
        original = getattr(_write_routes, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            direct_writes.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(_write_routes, name, spy)
    local = _fill(tmp_path / "local.zarr", reference, data)
    assert local.is_local and isinstance(local.zarr_store, LocalStore)
    assert {"write_array", "write_chunk"} <= set(direct_writes)  # the direct-file path
    direct_writes.clear()
    memory = _fill(MemoryStore(), reference, data)
    assert not memory.is_local and direct_writes == []  # zarr's API only
    # the same keys and bytes: the format-3 layout whichever way it was written
    want = _contents(local.zarr_store)
    got = _contents(memory.zarr_store)
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []
    assert any(k.endswith("/dG_dr_split/c.0.0") for k in want)  # derivatives were written
    _assert_same_reads(open_store(memory.zarr_store), open_store(tmp_path / "local.zarr"))
    assert memory.read_structures().equals(reference.read_structures())


def test_store_folder_is_a_question_require_local_path_a_demand(tmp_path, monkeypatch):
    """Two names for two contracts: the store's folder or ``None`` (resolved); a local
    path or a LocationError (kept relative)."""
    from dparallel.io.location import LocationError, require_local_path
    from dparallel.store._backend import store_folder

    monkeypatch.chdir(tmp_path)
    assert store_folder("s.zarr") == tmp_path.resolve() / "s.zarr"
    assert store_folder("s3://bucket/s.zarr") is None and store_folder(MemoryStore()) is None
    assert store_folder(LocalStore(str(tmp_path))) == tmp_path.resolve()
    assert str(require_local_path("s.zarr", "this")) == "s.zarr"
    with pytest.raises(LocationError, match="this needs a local path, not a URL"):
        require_local_path("s3://bucket/s.zarr", "this")


def test_an_fsspec_url_is_a_store_too(featurized):
    reference, data = featurized
    url = "memory://dparallel-test/s.zarr"
    written = _fill(url, reference, data)
    _assert_same_reads(open_store(url), written)
    assert open_store(url).read_structures().equals(reference.read_structures())
    assert open_store(url).info()["path"] == url


def test_what_needs_a_folder_says_so_for_another_store(featurized):
    reference, data = featurized
    memory = _fill(MemoryStore(), reference, data)
    with pytest.raises(StoreError, match="is not a local store: it has no path"):
        memory.path  # noqa: B018
    with pytest.raises(StoreError, match="the store lease is a file beside"):
        lease_path(memory.zarr_store)
    # a URL's lease is an object written conditionally (tests/store/test_object_store.py)
    assert type(StoreLease("s3://bucket/s.zarr")).__name__ == "ObjectLease"
    with pytest.raises(StoreError, match="needs conditional writes"):
        StoreLease("gs://bucket/s.zarr")
    # a matching store is reopened (resume), never replaced
    again = _fill(memory.zarr_store, reference, data)
    assert again.is_complete
    args = {
        "source_fingerprint": reference.attrs["source"],
        "plan": reference.plan,
    }
    with pytest.raises(StoreMismatchError, match="never replaced: empty it yourself"):
        create_store(memory.zarr_store, config={"other": 1}, **args)
    with pytest.raises(StoreMismatchError, match="never replaced"):
        create_store(memory.zarr_store, config=reference.attrs["config"], overwrite=True, **args)
    foreign = MemoryStore()
    zarr.create_group(store=foreign).attrs["x"] = 1
    with pytest.raises(StoreMismatchError, match="holds no dparallel store"):
        create_store(foreign, config=reference.attrs["config"], **args)
    with pytest.raises(StoreError, match="not a dparallel store"):
        Store(foreign)
    with pytest.raises(StoreError, match="store_status compares a folder"):
        store_status(memory.zarr_store, config={}, plan=None, source_fingerprint={})
    with pytest.raises(StoreError, match="read-only zarr store"):
        Store(memory.zarr_store.with_read_only(True), mode="r+")


def test_a_zarr_outside_the_tested_versions_writes_through_its_api(
    featurized, tmp_path, monkeypatch, caplog
):
    """One warning, no direct write, and the same files as the direct path writes."""
    reference, data = featurized
    direct = _fill(tmp_path / "direct.zarr", reference, data)
    _direct._available.cache_clear()
    monkeypatch.setattr(zarr, "__version__", "3.2.0")

    def refused(*args, **kwargs):
        raise AssertionError("a direct write with an untested zarr")

    for name in ("write_array", "write_chunk", "write_fill_chunk", "write_group"):
        monkeypatch.setattr(_write_routes, name, refused)
    with caplog.at_level(logging.WARNING, logger="dparallel.store._direct"):
        fallback = _fill(tmp_path / "fallback.zarr", reference, data)
        _fill(tmp_path / "again.zarr", reference, data)
    warnings = [r for r in caplog.records if "outside the versions" in r.getMessage()]
    assert len(warnings) == 1 and "zarr 3.2.0" in warnings[0].getMessage()
    assert _contents(fallback.zarr_store) == _contents(direct.zarr_store)
    _assert_same_reads(fallback, direct)
    _direct._available.cache_clear()


@pytest.mark.parametrize(
    ("version", "tested"),
    [("3.1.6", True), ("3.1.9", True), ("3.1.5", False), ("3.2.0", False), ("4.0.0a1", False),
     ("3.2", False), ("unknown", False)],
)  # fmt: skip
def test_the_tested_zarr_range(version, tested):
    _direct._available.cache_clear()
    try:
        assert _direct._available(version) is tested
    finally:
        _direct._available.cache_clear()


def test_the_pin_is_the_tested_range():
    """pyproject.toml pins zarr to exactly :data:`TESTED_ZARR`, and the zarr running is in it."""
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    (zarr_req,) = [Requirement(d) for d in deps if Requirement(d).name == "zarr"]
    low, high = (".".join(map(str, v)) for v in _direct.TESTED_ZARR)
    assert zarr_req.specifier == Requirement(f"zarr>={low},<{high}").specifier
    assert zarr_req.specifier.contains(zarr.__version__)
    dockerfile = (pyproject.parent / "docker" / "Dockerfile").read_text()
    (image_zarr,) = re.findall(r"(?<![\w.-])zarr==([\w.+!-]+)", dockerfile)
    assert zarr_req.specifier.contains(image_zarr)  # the image runs a tested zarr
    assert _direct.direct_writes_available()
