"""`overwrite` replaces only dparallel stores (or empty folders), never what is not ours."""

from __future__ import annotations

import os
from pathlib import Path

import ase.io
import pytest

from dparallel.cli.main import main
from dparallel.errors import DiskFullError, StoreMismatchError, UnsafePathError
from dparallel.io import open_source
from dparallel.io.synthetic import random_structures
from dparallel.store import create_store, is_dparallel_store, open_store, plan_partitions


@pytest.fixture
def world(tmp_path, rng, monkeypatch) -> dict[str, Path]:
    """A fake home with documents and .ssh, a project folder (cwd) with input and YAML."""
    home = tmp_path / "home" / "alice"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("secret key")
    (home / "thesis.tex").write_text("four years of work")
    monkeypatch.setenv("HOME", str(home))
    project = home / "work" / "project"
    project.mkdir(parents=True)
    data = project / "in.extxyz"
    ase.io.write(data, random_structures(12, rng, max_atoms=8), format="extxyz")
    (project / "workflow.yaml").write_text("name: mine\n")
    monkeypatch.chdir(project)
    return {"home": home, "project": project, "data": data, "tmp": tmp_path}


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` (path → bytes), to show nothing changed."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            if name.endswith(".dpindex.npz"):
                continue  # the input's index cache (written beside it on first read)
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def _create(path, data: Path, *, overwrite: bool, config=None, protect=()):
    src = open_source(data)
    return create_store(
        path,
        source_fingerprint=src.fingerprint(),
        plan=plan_partitions(src.atom_counts, 40),
        config=config if config is not None else {"ingest": {"n": 1}},
        overwrite=overwrite,
        protect=protect,
    )


def _targets(world) -> dict[str, tuple[str, type]]:
    """Dangerous ``-o`` values → (what the refusal must say, its error class)."""
    home, project = world["home"], world["project"]
    (world["tmp"] / "link-home").symlink_to(home)
    (world["tmp"] / "link-project").symlink_to(project)
    (project / "mydir").mkdir()
    (project / "mydir" / "notes.txt").write_text("my notes")
    (project / "report.pdf").write_bytes(b"%PDF")
    return {
        "~": ("your home directory", UnsafePathError),
        str(home): ("your home directory", UnsafePathError),
        str(world["tmp"] / "link-home"): ("your home directory", UnsafePathError),
        str(home.parent): ("holds your home directory", UnsafePathError),
        "/": ("filesystem root", UnsafePathError),
        ".": ("the working directory", UnsafePathError),
        str(world["tmp"] / "link-project"): ("the working directory", UnsafePathError),
        "..": ("holds the working directory", UnsafePathError),
        "in.extxyz": ("which this run reads", UnsafePathError),
        "mydir": ("not a dparallel store", StoreMismatchError),
        "report.pdf": ("is a file, not a dparallel store", StoreMismatchError),
    }


def test_overwrite_refuses_everything_that_is_not_ours(world):
    targets = _targets(world)
    before = _snapshot(world["tmp"])
    for target, (message, cls) in targets.items():
        with pytest.raises(cls, match=message) as info:
            _create(target, world["data"], overwrite=True)
        assert "--overwrite" not in str(info.value), target
    assert _snapshot(world["tmp"]) == before
    assert not list(world["tmp"].rglob("*.lock"))


def test_without_overwrite_a_non_store_is_refused_without_recommending_the_flag(world):
    targets = _targets(world)
    before = _snapshot(world["tmp"])
    for target in ("~", ".", "in.extxyz", "mydir", "report.pdf"):
        with pytest.raises(StoreMismatchError, match="not a dparallel store") as info:
            _create(target, world["data"], overwrite=False)
        assert "--overwrite" not in str(info.value) and "overwrite=" not in str(info.value)
    assert targets and _snapshot(world["tmp"]) == before


def test_a_store_holding_the_input_or_foreign_files_is_not_replaced(world):
    project = world["project"]
    store = _create("s.zarr", world["data"], overwrite=False)
    assert is_dparallel_store(store.path)
    (store.path / "keep.txt").write_text("mine")
    with pytest.raises(StoreMismatchError, match=r"files dparallel did not write \(keep.txt\)"):
        _create("s.zarr", world["data"], overwrite=True)
    (store.path / "keep.txt").unlink()
    moved = store.path / "in.extxyz"
    world["data"].rename(moved)
    with pytest.raises(UnsafePathError, match="which this run reads"):
        _create("s.zarr", moved, overwrite=True)
    assert moved.exists()
    other = _create("t.zarr", moved, overwrite=False)
    wf = other.path / "workflow.yaml"
    (project / "workflow.yaml").rename(wf)
    with pytest.raises(UnsafePathError, match=r"workflow.yaml, which this run reads"):
        _create("t.zarr", moved, overwrite=True, protect=[wf])
    assert wf.exists()


def test_another_store_holding_foreign_files_is_refused_without_recommending_the_flag(world):
    """A store of another config with a file of the user's in it: --overwrite would refuse
    it too, so the refusal without it says to move the file out, not to pass the flag."""
    store = _create("s.zarr", world["data"], overwrite=False)
    (store.path / "structures" / "NOTES.txt").write_text("mine")
    with pytest.raises(StoreMismatchError, match=r"did not write \(structures/NOTES.txt\)") as info:
        _create("s.zarr", world["data"], overwrite=False, config={"ingest": {"n": 2}})
    assert "--overwrite" not in str(info.value) and "overwrite=" not in str(info.value)
    assert (store.path / "structures" / "NOTES.txt").read_text() == "mine"


def test_overwrite_replaces_a_store_only_once_the_new_one_is_built(world, monkeypatch):
    import dparallel.store._create as create_module

    old = _create("s.zarr", world["data"], overwrite=False, config={"ingest": {"n": 1}})
    old.mark_done(0, {"old": True})
    before = _snapshot(old.path)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(create_module, "_build", disk_full)
    with pytest.raises(DiskFullError, match=r"s\.zarr: no space left on the device"):
        _create("s.zarr", world["data"], overwrite=True, config={"ingest": {"n": 2}})
    assert _snapshot(old.path) == before  # the old store is untouched
    assert sorted(p.name for p in world["project"].iterdir() if "s.zarr" in p.name) == ["s.zarr"]
    monkeypatch.undo()
    monkeypatch.chdir(world["project"])
    new = _create("s.zarr", world["data"], overwrite=True, config={"ingest": {"n": 2}})
    assert new.attrs["config"] == {"ingest": {"n": 2}} and len(new.done_partitions()) == 0
    assert sorted(p.name for p in world["project"].iterdir() if "s.zarr" in p.name) == ["s.zarr"]


def test_empty_directory_is_used_and_leftovers_of_interrupted_creations_are_removed(world):
    project = world["project"]
    (project / "s.zarr").mkdir()
    stale = project / "s.zarr.creating-otherhost-123-abcd"
    (stale / "structures").mkdir(parents=True)
    old_style = project / "s.zarr.creating-4242"
    old_style.mkdir()
    unrelated = project / "s.zarr.creating"  # not a name create_store makes: left alone
    unrelated.mkdir()
    store = _create("s.zarr", world["data"], overwrite=False)
    assert store.path == (project / "s.zarr").resolve() and not store.is_complete
    assert not stale.exists() and not old_style.exists() and unrelated.exists()
    assert open_store(project / "s.zarr").n_partitions == store.n_partitions


@pytest.mark.parametrize("command", ["ingest", "featurize"])
def test_cli_refuses_with_one_line_and_deletes_nothing(world, capsys, command):
    _targets(world)
    before = _snapshot(world["tmp"])
    desc = world["project"] / "descriptors.yaml"
    desc.write_text("acsf: {elements: [H, C, O, N], r_cut: 3.0, radial: [[0.5, 0.0]]}\n")
    extra = ["--descriptors", str(desc), "--local", "1"] if command == "featurize" else []
    before = _snapshot(world["tmp"])
    for target in ("~", ".", "in.extxyz", "mydir", "descriptors.yaml"):
        argv = [command, "in.extxyz", "-o", target, "--overwrite", "-q", *extra]
        assert main(argv) == 2, target
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"dparallel {command}: error: ")
        assert "--overwrite" not in err
    assert _snapshot(world["tmp"]) == before


def test_a_store_below_a_file_or_inside_another_store_is_refused_naming_it(world, capsys):
    # below a file: "File exists: …/in.extxyz" (an OSError's words); inside a store: the
    # new store was written into the old one's folder, a member it does not own
    data = world["data"]
    assert main(["ingest", str(data), "-o", "s.zarr", "-q"]) == 0
    before = _snapshot(world["project"])
    for target, blamed, why in [
        (f"{data}/x.zarr", data, "is a file, not a folder"),
        ("s.zarr/inner.zarr", world["project"] / "s.zarr", "is a dparallel store"),
        ("s.zarr/a/b.zarr", world["project"] / "s.zarr", "is a dparallel store"),
    ]:
        assert main(["ingest", str(data), "-o", target, "-q"]) == 2
        assert capsys.readouterr().err == (
            f"dparallel ingest: error: refusing to write a store at {target}: {blamed} {why}; "
            "choose a path outside it\n"
        )
    assert _snapshot(world["project"]) == before
