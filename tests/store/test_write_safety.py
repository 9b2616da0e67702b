"""The store's writes go through dparallel._files: no link is written through, a partition
whose folder became a link is refused, and what a done marker declares is fsynced first."""

from __future__ import annotations

import os

import ase.io
import numpy as np
import pytest

from dparallel.errors import UnsafePathError
from dparallel.io.synthetic import random_structures
from dparallel.store import current_identity, open_store, store_identity
from dparallel.workflow.ingest import IngestOptions, ingest


def test_a_chunk_hard_linked_to_a_users_file_is_replaced_not_overwritten(store, tmp_path):
    s = open_store(store, mode="r+")
    chunk = store / "structures" / "positions" / "c.1.0"
    assert chunk.is_file()
    before = s.read_structures(*s.partition_range(1))
    user = tmp_path / "user.bin"
    user.write_bytes(b"the user's bytes")
    chunk.unlink()
    os.link(user, chunk)
    s.write_structures(1, before)
    assert user.read_bytes() == b"the user's bytes"
    assert os.stat(chunk).st_nlink == 1
    np.testing.assert_array_equal(
        open_store(store).read_structures(*s.partition_range(1)).positions, before.positions
    )


def test_a_partition_folder_that_became_a_link_is_refused_untouched(store, tmp_path):
    s = open_store(store, mode="r+")
    user = tmp_path / "users-folder"
    user.mkdir()
    (user / "thesis.tex").write_text("keep me")
    part = store / "parts" / "1"
    if part.exists():
        import shutil

        shutil.rmtree(part)
    part.symlink_to(user)
    block = {"values": np.ones((3, 4)), "atom_index": np.arange(3)}
    with pytest.raises(UnsafePathError, match=r"parts/1 is a symbolic link"):
        s.write_features(1, {"acsf": {"H": block}})
    with pytest.raises(UnsafePathError):
        s.mark_done(1)
    assert sorted(p.name for p in user.iterdir()) == ["thesis.tex"]


def test_the_done_marker_comes_after_the_partitions_files_are_synced(
    store, monkeypatch: pytest.MonkeyPatch
):
    from dparallel import _files

    s = open_store(store, mode="r+")
    s.clear_done(2)
    order: list[str] = []
    real_replace, real_syncfs, real_fsync = os.replace, _files._syncfs, _files._fsync_path
    monkeypatch.setattr(_files, "_syncfs", lambda f: order.append("sync") or real_syncfs(f))
    monkeypatch.setattr(_files, "_fsync_path", lambda f: order.append("sync") or real_fsync(f))

    def replace(src, dst):
        order.append("done" if "partitions/done" in str(dst) else "write")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    block = {"values": np.ones((3, 4)), "atom_index": np.arange(3)}
    s.write_features(2, {"acsf": {"H": block}})
    assert "sync" not in order  # chunks and documents: written, not yet synced one by one
    s.mark_done(2)
    assert order.count("done") == 1
    done = order.index("done")
    last_write = max(i for i, o in enumerate(order[:done]) if o == "write")
    assert "sync" in order[last_write:done]  # every file on disk before the marker
    assert 2 in open_store(store).done_partitions()


def test_a_partitions_report_is_written_as_zarr_writes_it_without_zarrs_api(
    store, tmp_path, monkeypatch: pytest.MonkeyPatch
):
    """A task that made ``parts/<p>`` knows its attributes: the report's document is
    written from the task's thread (no zarr round trip, ~10 ms of CPU a task), the same
    bytes zarr's group API writes, and synced before the done marker."""
    import shutil

    import zarr

    from dparallel import _files

    s = open_store(store, mode="r+")
    s.clear_done(2)
    shutil.rmtree(store / "parts" / "2", ignore_errors=True)  # as before a first task
    block = {"values": np.ones((3, 4)), "atom_index": np.arange(3)}
    s.write_features(2, {"acsf": {"H": block}})
    report = {"n_atoms": 7, "seconds": 0.25, "worker": "tcp://127.0.0.1:1"}

    def no_zarr_group(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("zarr's group API used for the report")

    monkeypatch.setattr(type(s), "_partition_group", no_zarr_group)
    order: list[str] = []
    real_replace, real_syncfs, real_fsync = os.replace, _files._syncfs, _files._fsync_path
    monkeypatch.setattr(_files, "_syncfs", lambda f: order.append("sync") or real_syncfs(f))
    monkeypatch.setattr(_files, "_fsync_path", lambda f: order.append("sync") or real_fsync(f))
    monkeypatch.setattr(os, "replace", lambda a, b: order.append(str(b)) or real_replace(a, b))
    s.mark_done(2, report)
    document = str(store / "parts" / "2" / "zarr.json")
    assert order.index(document) < order.index("sync") < len(order) - 1
    assert "partitions/done" in order[-1]

    reference = zarr.open_group(tmp_path / "reference.zarr", mode="w", zarr_format=3)
    reference.create_group("parts/2").attrs["report"] = dict(report)
    written = (store / "parts" / "2" / "zarr.json").read_bytes()
    assert written == (tmp_path / "reference.zarr" / "parts" / "2" / "zarr.json").read_bytes()
    monkeypatch.undo()
    assert open_store(store).report(2) == report
    assert 2 in open_store(store).done_partitions()


def test_a_store_has_an_identity_that_changes_when_it_is_made_again(tmp_path, rng, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "in.extxyz"
    ase.io.write(data, random_structures(10, rng, max_atoms=6), format="extxyz")
    first = open_store(ingest(data, "s.zarr", IngestOptions(partition_atoms=40)).store.path)
    then = store_identity(first)
    assert then["identity"] and current_identity(first) == then
    ase.io.write(data, random_structures(12, rng, max_atoms=6), format="extxyz")
    ingest(data, "s.zarr", IngestOptions(partition_atoms=40, overwrite=True))
    now = current_identity(first)
    assert now is not None and now["identity"] != then["identity"]
