"""A store knows its own files without their metadata; a user's file anywhere is foreign."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from dparallel.errors import StoreMismatchError
from dparallel.store import check_replaceable
from dparallel.store._own_files import foreign_files

_HEX = "0123456789abcdef" * 2

#: What a killed task leaves in a partition: a chunk written, its array's metadata not yet.
_KILL_BEFORE_METADATA = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import numpy as np
    from dparallel.store import open_store

    real = os.replace

    def replace(src, dst):  # killed as the array's metadata is put in place
        if Path(dst).name == "zarr.json" and Path(dst).parent.name == "values":
            os.kill(os.getpid(), signal.SIGKILL)
        return real(src, dst)

    os.replace = replace
    store = open_store(sys.argv[1], mode="r+")
    block = {"values": np.ones((3, 4)), "atom_index": np.arange(3)}
    store.write_features(1, {"acsf": {"H": block}})
    """
)


def test_a_partition_half_written_by_a_killed_task_is_ours(store):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _KILL_BEFORE_METADATA, str(store)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    values = store / "parts" / "1" / "features" / "acsf" / "H" / "values"
    assert (values / "c.0.0").is_file() and not (values / "zarr.json").exists()
    assert [p.name.endswith(".partial") for p in values.glob("zarr.json.*")] == [True]
    assert foreign_files(store) == []
    assert check_replaceable(store) == store.resolve()


@pytest.mark.parametrize(
    "leftover",
    [
        "parts/2/features/acsf/O/d/H/dG_dr_split/c.0.0",  # no metadata at any level yet
        "parts/2/features/acsf/O/atom_index/c.0",
        "parts/2/neighbors/pairs/c.0.0",  # write_partition_arrays(group="neighbors")
        "structures/positions/c.1." + _HEX + ".partial",  # zarr's write, cut short
        "parts/0/zarr." + _HEX + ".partial",
        "structures/positions/c/0/0",  # format 1 and 2 chunk keys
    ],
)
def test_every_path_the_layout_produces_is_ours_without_metadata(store, leftover):
    path = store / leftover
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x00")
    assert foreign_files(store) == []


@pytest.mark.parametrize(
    "plant",
    [
        "structures/c.0",  # a chunk key in a group
        "structures/positions/zarr.json.bak",
        "structures/notes/zarr.json",  # no array: its zarr.json is not one
        "partitions/done/c/x",
        "parts/notes/zarr.json",  # not a partition
        "parts/0/features/acsf/H/notes/c.0",
        "parts/0/features/acsf/H/values/c.0/zarr.json",
        "parts/0/data.csv",
        "NOTES.txt",
        "c." + _HEX + ".partial.txt",
    ],
)
def test_a_user_file_named_like_ours_outside_the_layout_is_named_and_kept(store, plant):
    mine = store / plant
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("mine")
    assert foreign_files(store) == [plant]
    with pytest.raises(StoreMismatchError, match="did not write") as info:
        check_replaceable(store)
    assert plant in str(info.value)
    assert mine.read_text() == "mine"


def test_links_special_files_and_empty_foreign_folders_are_named(store, tmp_path):
    (tmp_path / "elsewhere").write_text("mine")
    (store / "parts" / "0" / "zarr.json").unlink()
    (store / "structures" / "positions" / "c.0.0").unlink()
    (store / "structures" / "positions" / "c.0.0").symlink_to(tmp_path / "elsewhere")
    os.mkfifo(store / "atoms" / "fifo")
    (store / "parts" / "empty").mkdir()
    assert foreign_files(store) == ["atoms/fifo", "parts/empty/", "structures/positions/c.0.0"]
