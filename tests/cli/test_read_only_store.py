"""A store on a read-only filesystem (a shared dataset a user can only read): read and
trained from without a write; a command that would write it says in one line what needs
write access. Needs root for the read-only bind mount (skipped otherwise)."""

from __future__ import annotations

import shutil

import pytest
from hco import featurized_hco

from dparallel.cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A folder holding a structure file and its featurized store."""
    folder = featurized_hco(tmp_path_factory.mktemp("shared")).parent
    for cache in folder.glob("*.dpindex.npz"):
        cache.unlink()  # as a dataset shared without it: a reader's index goes elsewhere
    return folder


def _listing(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*"))


def test_a_read_only_store_is_summarised_verified_and_trained_from(
    dataset, read_only_view, tmp_path, capsys
):
    before = _listing(dataset)
    store = read_only_view(dataset) / "f.zarr"
    assert main(["info", str(store)]) == 0
    assert main(["info", str(store), "--verify"]) == 0
    model = tmp_path / "m"
    small = ["--set", "epochs=1", "--set", "hidden=[4]", "-q"]
    assert main(["train", str(store), "-o", str(model), *small]) == 0, capsys.readouterr().err
    assert (model / "model.pt").is_file() and _listing(dataset) == before


def test_writing_a_read_only_store_says_what_needs_write_access(
    dataset, read_only_view, tmp_path, capsys
):
    """It was "Read-only file system: STORE.lock", naming a file the user never asked for;
    now the store, the folder that must be writable, and that reading needs none."""
    shared = read_only_view(dataset)
    data = tmp_path / "data.xyz"
    shutil.copy(dataset / "data.xyz", data)
    for target in (shared / "f.zarr", shared / "new" / "s.zarr"):
        assert main(["ingest", str(data), "-o", str(target), "-q"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"dparallel ingest: error: cannot write {target}: Read-only file")
        assert f"needs write access to {shared}; reading a store" in err, err
        assert "\n" not in err


def test_a_folder_of_another_user_says_what_needs_write_access(dataset, tmp_path):
    """The same for permission denied: a folder of mode 0555 (root's), written by a process
    without root's override of file modes (``setpriv`` drops it; skipped where it cannot)."""
    import os
    import subprocess
    import sys

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop the override of file modes")
    folder = tmp_path / "theirs"
    folder.mkdir()
    folder.chmod(0o555)
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    argv = [sys.executable, "-m", "dparallel", "ingest", str(dataset / "data.xyz"), "-o"]
    done = subprocess.run(
        [*drop, *argv, str(folder / "s.zarr"), "-q"], capture_output=True, text=True, timeout=120
    )
    if "setpriv:" in done.stderr:
        pytest.skip(f"setpriv cannot drop capabilities here: {done.stderr.strip()}")
    err = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in err, err
    assert err.startswith(f"dparallel ingest: error: cannot write {folder / 's.zarr'}: Permission")
    assert f"needs write access to {folder}; reading a store" in err
    assert not list(folder.iterdir())


def test_a_read_only_model_folder_is_not_called_a_store(dataset, read_only_view, tmp_path, capsys):
    """``train --resume`` into a model folder on a read-only mount: the lease's line said
    "reading a store (info, info --verify, train, evaluate) needs none" of the model folder;
    it says what reads a model folder without writing it."""
    model = tmp_path / "models" / "m"
    small = ["--set", "epochs=1", "--set", "hidden=[4]", "-q"]
    assert main(["train", str(dataset / "f.zarr"), "-o", str(model), *small]) == 0
    capsys.readouterr()
    shared = read_only_view(model.parent) / "m"
    assert main(["train", str(dataset / "f.zarr"), "-o", str(shared), "--resume", *small]) == 2
    err = capsys.readouterr().err.strip()
    assert f"cannot write {shared}: Read-only file system" in err, err
    assert "reading a store" not in err and "evaluating it" in err and "\n" not in err
