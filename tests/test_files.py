"""dparallel._files: the one write path (new file renamed into place, no links, full disk)."""

from __future__ import annotations

import errno
import json
import os
import sys
from typing import TYPE_CHECKING

import pytest

from dparallel import _files
from dparallel._files import (
    LOG_MARKER,
    check_log_target,
    claim_directory,
    new_file,
    open_log,
    refuse_links,
    strict_json,
    sync_pending,
    write_file,
    write_with,
)
from dparallel.errors import DiskFullError, NonFiniteError, UnsafePathError

if TYPE_CHECKING:
    from pathlib import Path


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "partial" in p.name)


def test_a_link_at_the_target_is_replaced_never_written_through(tmp_path: Path) -> None:
    user = tmp_path / "user.txt"
    user.write_text("the user's")
    soft, hard = tmp_path / "soft", tmp_path / "hard"
    soft.symlink_to(user)
    os.link(user, hard)
    write_file(soft, "ours")
    write_file(hard, b"ours too")
    assert user.read_text() == "the user's"
    assert not soft.is_symlink() and soft.read_text() == "ours"
    assert hard.read_bytes() == b"ours too" and os.stat(user).st_nlink == 1
    assert _leftovers(tmp_path) == []


def test_a_folder_on_the_way_that_is_a_link_is_refused(tmp_path: Path) -> None:
    root, user = tmp_path / "store", tmp_path / "users"
    (root / "parts").mkdir(parents=True)
    user.mkdir()
    (user / "precious").write_text("keep")
    (root / "parts" / "0").symlink_to(user)
    with pytest.raises(UnsafePathError, match=r"parts/0 is a symbolic link"):
        write_file(root / "parts" / "0" / "zarr.json", "{}", root=root)
    with pytest.raises(UnsafePathError, match="not inside"):
        refuse_links(root, tmp_path / "elsewhere")
    assert sorted(p.name for p in user.iterdir()) == ["precious"]
    refuse_links(root, root / "parts" / "new" / "deeper")  # what does not exist yet passes


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_is_one_error_naming_path_and_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    real = os.write

    def full(fd: int, data: bytes) -> int:
        if len(data) > 10:
            raise OSError(code, os.strerror(code))
        return real(fd, data)

    monkeypatch.setattr(os, "write", full)
    target = tmp_path / "checkpoint.pt"
    with pytest.raises(DiskFullError) as info:
        write_file(target, b"x" * 5000, durable=True)
    assert str(target) in str(info.value) and "5,000 bytes" in str(info.value)
    assert info.value.path == str(target) and info.value.needed == 5000
    assert list(tmp_path.iterdir()) == []  # no temporary file left, no target


def test_a_library_writer_on_a_full_disk(tmp_path: Path) -> None:
    def torch_like(path: Path) -> None:  # torch's C++ writer: a RuntimeError with text
        path.write_bytes(b"half")
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    with pytest.raises(DiskFullError, match=r"model\.pt"):
        write_with(tmp_path / "model.pt", torch_like)
    assert list(tmp_path.iterdir()) == []


def test_new_file_replaces_only_when_the_block_completes(tmp_path: Path) -> None:
    target = tmp_path / "metrics.csv"
    target.write_text("old\n")
    with pytest.raises(ValueError, match="boom"), new_file(target, "w") as fh:
        fh.write("half")
        raise ValueError("boom")
    assert target.read_text() == "old\n" and _leftovers(tmp_path) == []
    with new_file(target, "w", durable=True) as fh:
        fh.write("new\n")
    assert target.read_text() == "new\n"
    with pytest.raises(ValueError, match="new file"), new_file(target, "a"):
        pass


def test_pending_files_are_synced_once_in_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync_pending()  # what earlier tests in this process left pending is not this test's
    synced: list[str] = []
    real_fsync, real_syncfs = os.fsync, _files._syncfs
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(_files, "_syncfs", lambda f: synced.append("syncfs") or real_syncfs(f))
    for i in range(5):
        write_file(tmp_path / f"c.{i}", b"chunk", pending=True)
    assert synced == []  # written without a sync each
    sync_pending()
    assert synced in (["syncfs"], ["syncfs", *["fsync"] * 6])  # one flush (or its fallback)
    synced.clear()
    sync_pending()
    assert synced == []  # nothing pending any more
    monkeypatch.setattr(_files, "_syncfs", lambda f: False)  # no syncfs: fsyncs at once
    for i in range(5):
        write_file(tmp_path / f"c.{i}", b"chunk", pending=True)
    sync_pending()
    assert synced == ["fsync"] * 6  # five files, then their one folder


def test_a_sync_starts_no_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # libc was found by ctypes.util.find_library, which runs `ldconfig -p` in a
    # subprocess: ~2.6 ms that every partition's done marker paid
    import subprocess

    started: list[object] = []
    real = subprocess.Popen.__init__
    monkeypatch.setattr(
        subprocess.Popen, "__init__", lambda self, *a, **k: started.append(a) or real(self, *a, **k)
    )
    for i in range(5):
        write_file(tmp_path / f"c.{i}", b"chunk", pending=True)
    sync_pending()
    assert started == []
    if sys.platform == "linux":
        assert _files._syncfs(str(tmp_path)) is True  # syncfs itself is still found


def test_log_appends_only_to_its_own_files(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    with open_log(log) as fh:
        fh.write("first\n")
    with open_log(log) as fh:
        fh.write("second\n")
    assert log.read_text() == LOG_MARKER + "first\nsecond\n"
    empty = tmp_path / "empty.log"
    empty.touch()
    assert check_log_target(empty) == empty
    user = tmp_path / "input.extxyz"
    user.write_text("2\nLattice=...\n")
    with pytest.raises(UnsafePathError, match="a file of yours"):
        check_log_target(user)
    with pytest.raises(UnsafePathError, match="a file of yours"):
        open_log(user)
    link = tmp_path / "link.log"
    link.symlink_to(log)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        check_log_target(link)
    with pytest.raises(UnsafePathError):
        open_log(link)
    os.link(log, tmp_path / "other-name.log")
    with pytest.raises(UnsafePathError, match="hard links"):
        check_log_target(log)
    with pytest.raises(UnsafePathError, match="folder"):
        check_log_target(tmp_path)
    assert user.read_text() == "2\nLattice=...\n"


def test_json_output_is_strict() -> None:
    import numpy as np

    assert json.loads(strict_json({"a": np.float64(1.5), "b": [1, 2]})) == {"a": 1.5, "b": [1, 2]}
    with pytest.raises(NonFiniteError, match=r"routes\.x\.max_abs_diff"):
        strict_json({"routes": {"x": {"max_abs_diff": float("nan")}}})
    with pytest.raises(NonFiniteError, match=r"rmse\[1\]"):
        strict_json({"rmse": [1.0, float("inf")]})
    assert json.loads(strict_json({"v": float("nan")}, missing=True)) == {"v": None}


def test_an_output_folder_is_ours_only_when_new_empty_or_marked(tmp_path: Path) -> None:
    user = tmp_path / "here"
    user.mkdir()
    (user / "metrics.csv").write_text("the user's")
    with pytest.raises(UnsafePathError, match=r"did not write \(metrics.csv\)"):
        claim_directory(user, ".mark", "model")
    assert claim_directory(tmp_path / "new", ".mark", "model") is True
    assert claim_directory(tmp_path / "new", ".mark", "model") is False  # marked: ours
    (tmp_path / "empty").mkdir()
    assert claim_directory(tmp_path / "empty", ".mark", "model") is False
    store = tmp_path / "s.zarr"
    store.mkdir()
    with pytest.raises(UnsafePathError, match="lies inside"):
        claim_directory(store / "m", ".mark", "model", protect=[store])
    with pytest.raises(UnsafePathError, match="it holds"):
        claim_directory(tmp_path, ".mark", "model", protect=[store])
    (tmp_path / "file").write_text("x")
    with pytest.raises(UnsafePathError, match="is a file"):
        claim_directory(tmp_path / "file", ".mark", "model")
    assert (user / "metrics.csv").read_text() == "the user's"
    assert _files.temporary_name(tmp_path / "c.0").name.startswith("c.0.")


def test_sample_names_is_the_one_list_of_names_in_messages():
    """What the output-folder refusals of ``_files`` and of the store (``store/_safety``)
    show of a folder's entries: one helper, at layer 0."""
    from dparallel._files import sample_names
    from dparallel.store import _safety

    assert sample_names(["b", "a"]) == "a, b"
    assert sample_names([f"f{i}" for i in range(7)]) == "f0, f1, f2, f3, f4 and 2 more"
    assert sample_names(["c", "b", "a"], most=1) == "a and 2 more"
    assert _safety.sample_names is sample_names


def test_a_folder_below_a_file_is_refused_naming_the_file(tmp_path):
    # `dparallel train STORE -o data.xyz/model` said "Not a directory: …/data.xyz/model"
    data = tmp_path / "data.xyz"
    data.write_text("1\n\nH 0 0 0\n")
    with pytest.raises(UnsafePathError) as refused:
        claim_directory(data / "model", ".mark", "model")
    assert str(refused.value) == (
        f"refusing to write a model into {data / 'model'}: {data} is a file, not a folder; "
        "choose another output directory"
    )
    assert data.read_text() == "1\n\nH 0 0 0\n"


def test_a_log_below_a_file_is_refused_and_its_missing_folders_are_made(tmp_path):
    # a log below a file, or in a folder not there yet, was accepted and never written
    data = tmp_path / "data.xyz"
    data.write_text("1\n\nH 0 0 0\n")
    with pytest.raises(UnsafePathError) as refused:
        check_log_target(data / "logs" / "run.log")
    assert str(refused.value) == (
        f"refusing to write the log to {data / 'logs' / 'run.log'}: {data} is a file, not a "
        "folder; choose another --log-file"
    )
    log = tmp_path / "new" / "sub" / "run.log"
    assert check_log_target(log) == log and not log.parent.exists()  # nothing created
    with open_log(log) as fh:
        fh.write("first\n")
    assert log.read_text() == LOG_MARKER + "first\n"
    assert data.read_text() == "1\n\nH 0 0 0\n"


def test_a_file_in_the_way_is_one_check_for_every_output_path():
    """A store (``-o``), an output folder and the log are refused below a file by one
    helper, at layer 0."""
    from dparallel._files import file_in_the_way
    from dparallel.store import _safety

    assert _safety.file_in_the_way is file_in_the_way
