"""`--overwrite` checks every entry of a store, builds the new one aside, refuses roots."""

from __future__ import annotations

import os
from pathlib import Path

import ase.io
import pytest

import dparallel.workflow.ingest as ingest_module
from dparallel.cli.main import main
from dparallel.errors import StoreMismatchError, UnsafePathError
from dparallel.io.synthetic import random_structures
from dparallel.store import check_replaceable, lease_path
from dparallel.store._safety import foreign_files
from dparallel.workflow.ingest import IngestOptions, ingest


@pytest.fixture
def data(tmp_path, rng, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "in.extxyz"
    ase.io.write(path, random_structures(30, rng, max_atoms=8), format="extxyz")
    return path


def _snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def test_a_store_as_written_has_no_foreign_files(data):
    store = ingest(data, "s.zarr", IngestOptions(partition_atoms=40)).store
    assert foreign_files(store.path) == []


@pytest.mark.parametrize(
    "plant",
    ["structures/NOTES.txt", "parts/0/mine.npy", "partitions/done/backup/c.0", "atoms/x.json"],
)
def test_a_user_file_at_any_depth_is_named_and_kept(data, plant):
    ingest(data, "s.zarr", IngestOptions(partition_atoms=40))
    mine = Path("s.zarr") / plant
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("mine")
    with pytest.raises(StoreMismatchError, match="did not write") as info:
        ingest(data, "s.zarr", IngestOptions(partition_atoms=40, overwrite=True))
    assert plant in str(info.value)
    assert mine.read_text() == "mine"


def test_a_symbolic_link_inside_a_store_is_foreign(data, tmp_path):
    ingest(data, "s.zarr", IngestOptions(partition_atoms=40))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "s.zarr" / "structures" / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StoreMismatchError, match="structures/link"):
        check_replaceable("s.zarr")


def _fail_on_the_second_partition(monkeypatch):
    """Make ingesting partition 1 fail as a full disk would (until ``monkeypatch.undo()``)."""
    real = ingest_module.ingest_partition

    def fail(source, store, p):
        if p == 1:
            raise OSError(28, "No space left on device")
        return real(source, store, p)

    monkeypatch.setattr(ingest_module, "ingest_partition", fail)


def test_a_failed_overwrite_leaves_the_old_store(data, tmp_path, monkeypatch):
    old = ingest(data, "s.zarr", IngestOptions(partition_atoms=40, units="ase")).store
    assert old.n_partitions > 2
    before = _snapshot(old.path)
    _fail_on_the_second_partition(monkeypatch)
    with pytest.raises(OSError, match=r"s\.zarr: no space left on the device"):  # DiskFullError
        ingest(data, "s.zarr", IngestOptions(partition_atoms=50, overwrite=True))
    assert _snapshot(old.path) == before  # not a byte of the old store changed
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    result = ingest(data, "s.zarr", IngestOptions(partition_atoms=50, overwrite=True))
    assert result.partitions_already_done == 1  # the replacement resumed where it stopped
    new = result.store
    assert new.path == old.path and new.is_complete
    assert new.attrs["config"]["ingest"]["partition_atoms"] == 50
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("s.zarr")) == ["s.zarr"]


def test_the_filesystem_root_is_refused_in_one_line(data, capsys):
    with pytest.raises(UnsafePathError, match="filesystem root"):
        lease_path("/")
    assert main(["ingest", str(data), "-o", "/", "--overwrite", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        f"dparallel ingest: error: refusing to replace /: {'it is the filesystem root'}"
    ]


def test_a_mount_point_is_refused(monkeypatch, tmp_path):
    target = tmp_path / "mnt"
    target.mkdir()
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == target)
    with pytest.raises(UnsafePathError, match="mount point"):
        check_replaceable(target)


def test_a_replacement_of_another_config_left_aside_is_not_resumed(data, tmp_path, monkeypatch):
    ingest(data, "s.zarr", IngestOptions(partition_atoms=40))
    _fail_on_the_second_partition(monkeypatch)
    with pytest.raises(OSError):
        ingest(data, "s.zarr", IngestOptions(partition_atoms=50, overwrite=True))
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    result = ingest(data, "s.zarr", IngestOptions(partition_atoms=60, overwrite=True))
    assert result.partitions_already_done == 0 and result.store.is_complete
    assert result.store.attrs["config"]["ingest"]["partition_atoms"] == 60
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("s.zarr")] == ["s.zarr"]
