"""The random-access copy of a file ASE reads only from its start (io/_frames.py)."""

from __future__ import annotations

import ase
import ase.io
import numpy as np
from ase.build import bulk

from dparallel.io import _index, open_source
from dparallel.io._frames import FramesCopy


def _frames(n: int) -> list[ase.Atoms]:
    frames = []
    for k in range(n):
        atoms = bulk("Cu", "fcc", a=3.6, cubic=True)
        atoms.rattle(0.05, seed=k)
        frames.append(atoms)
    return frames


def test_only_formats_ase_reads_from_their_start_are_copied(tmp_path):
    for name, fmt in (("a.traj", "traj"), ("a.db", "db"), ("a.cif", "cif")):
        ase.io.write(tmp_path / name, _frames(3), format=fmt)
        source = open_source(tmp_path / name)
        copied = tmp_path / f"{name}.dpframes"
        assert copied.is_file() == (fmt == "cif")
        assert source.index.frames == (copied if fmt == "cif" else None)


def test_a_copy_changed_since_is_not_read(tmp_path, monkeypatch):
    """A copy that is not the one its index recorded (size, mtime) is left alone: the file
    is read through ASE, as it is."""
    path = tmp_path / "a.cif"
    ase.io.write(path, _frames(4))
    open_source(path)
    copied = tmp_path / "a.cif.dpframes"
    ase.io.write(copied, _frames(4)[::-1], format="traj")  # another copy, e.g. a stale one
    monkeypatch.setattr(_index, "_KEPT", {})  # another process: from the cache file
    source = open_source(path)
    assert source.index.frames is None
    ref = ase.io.read(path, ":")
    np.testing.assert_array_equal(
        source.read(1, 3).positions, np.concatenate([a.positions for a in ref[1:3]])
    )


def test_no_copy_where_a_label_would_be_lost(tmp_path):
    """A .traj keeps no other per-atom arrays (a ``dft_forces`` that ``forces_key`` may
    name): no copy then, and no file left."""
    target = tmp_path / "x.dpframes"
    kept, lost = _frames(2)
    lost.arrays["dft_forces"] = np.ones((len(lost), 3))
    copy = FramesCopy(target)
    copy.add(kept)
    copy.add(lost)
    assert copy.done() is None
    assert list(tmp_path.iterdir()) == []
    copy = FramesCopy(target)
    copy.add(kept)
    assert copy.done() == target
    assert np.array_equal(ase.io.read(target, format="traj").positions, kept.positions)


def test_an_index_cached_before_copies_is_built_again(tmp_path, monkeypatch):
    """An ASE format's index cached without a copy's record (and without cells: periodic
    -1) is built again once: the copy made, the cells read."""
    path = tmp_path / "a.cif"
    ase.io.write(path, _frames(3))
    open_source(path)
    cache = tmp_path / "a.cif.dpindex.npz"
    with np.load(cache) as z:
        old = {k: z[k] for k in z.files if k != "frames"}
    old["periodic"] = np.full(3, -1)
    np.savez(cache, **old)
    (tmp_path / "a.cif.dpframes").unlink()
    monkeypatch.setattr(_index, "_KEPT", {})  # another process: from the cache file
    index = open_source(path).index
    np.testing.assert_array_equal(index.periodic, [3, 3, 3])
    assert index.frames == tmp_path / "a.cif.dpframes" and index.frames.is_file()
