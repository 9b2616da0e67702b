"""Library ingest: resume after an interruption writes only what is missing."""

from __future__ import annotations

import ase.io
import numpy as np
import pytest

from dparallel.errors import DiskFullError
from dparallel.io import open_source
from dparallel.io.synthetic import random_structures
from dparallel.store import open_store
from dparallel.types import StructureBatch
from dparallel.workflow import ingest as ingest_mod
from dparallel.workflow.ingest import IngestOptions, ingest


def test_resume_after_interruption(tmp_path, rng, monkeypatch):
    path = tmp_path / "d.xyz"
    ase.io.write(path, random_structures(60, rng, max_atoms=12), format="extxyz")
    out = tmp_path / "s.zarr"
    real = ingest_mod.ingest_partition
    calls: list[int] = []

    def flaky(source, store, p):
        if len(calls) == 3:
            raise KeyboardInterrupt  # the process dies mid-run
        calls.append(p)
        return real(source, store, p)

    monkeypatch.setattr(ingest_mod, "ingest_partition", flaky)
    with pytest.raises(KeyboardInterrupt):
        ingest(path, out, IngestOptions(partition_atoms=50))
    store = open_store(out)
    np.testing.assert_array_equal(store.done_partitions(), calls)
    assert not store.is_complete
    monkeypatch.undo()

    written: list[int] = []
    monkeypatch.setattr(
        ingest_mod, "ingest_partition", lambda s, st, p: written.append(p) or real(s, st, p)
    )
    result = ingest(path, out, IngestOptions(partition_atoms=50))
    assert result.partitions_already_done == 3
    assert sorted(written) == sorted(set(range(store.n_partitions)) - set(calls))
    ref = StructureBatch.from_ase(ase.io.read(path, ":"))
    assert open_store(out).read_structures().equals(ref)


def test_ingest_n2p2_units_into_store(tmp_path):
    path = tmp_path / "input.data"
    path.write_text(
        "begin set=test\ncomment a molecule\nlattice 10 0 0\nlattice 0 10 0\nlattice 0 0 10\n"
        "atom 1 2 3 H 0 0 0.5 0 0\natom 2 2 3 H 0 0 -0.5 0 0\nenergy -1\nend\n"
    )
    ingest(path, tmp_path / "s.zarr", IngestOptions(units="bohr-hartree"))
    got = open_store(tmp_path / "s.zarr").read_structures()
    ref = open_source(path, units="bohr-hartree").read()
    assert got.equals(ref) and list(got.tags) == ["test"]
    assert got.forces[0, 0] == pytest.approx(0.5 * ase.units.Hartree / ase.units.Bohr)


def _dft_labelled(path, rng) -> list[ase.Atoms]:
    """Structures with their labels under dft_energy / dft_forces only, written as extxyz."""
    frames = random_structures(20, rng, max_atoms=8)
    for k, atoms in enumerate(frames):
        atoms.calc = None
        atoms.info["dft_energy"] = -2.0 - 0.5 * k
        atoms.arrays["dft_forces"] = rng.normal(size=(len(atoms), 3))
    ase.io.write(path, frames, format="extxyz")
    return frames


def test_ingest_with_label_keys_stores_them_and_resumes_only_with_them(tmp_path, rng):
    """Reference: ASE's reading of the file under the keys. The keys are part of the store's
    recorded config, so the store is resumed with the same keys, refused with others (as
    for other units or format) and replaced with overwrite."""
    from dparallel.errors import StoreMismatchError

    path = tmp_path / "dft.xyz"
    _dft_labelled(path, rng)
    out = tmp_path / "s.zarr"
    keys = {"energy_key": "dft_energy", "forces_key": "dft_forces"}
    ingest(path, out, IngestOptions(partition_atoms=30, **keys))
    got = open_store(out).read_structures()
    frames = ase.io.read(path, ":")
    np.testing.assert_array_equal(got.energy, [a.info["dft_energy"] for a in frames])
    np.testing.assert_array_equal(
        got.forces, np.concatenate([a.arrays["dft_forces"] for a in frames])
    )
    assert (
        open_store(out).attrs["config"]["ingest"] | keys
        == open_store(out).attrs["config"]["ingest"]
    )
    again = ingest(path, out, IngestOptions(partition_atoms=30, **keys))
    assert again.partitions_written == 0  # the same keys: resumed, nothing to do
    for other in ({}, {"energy_key": "dft_energy"}):
        with pytest.raises(StoreMismatchError, match=r"ingest\.forces_key"):
            ingest(path, out, IngestOptions(partition_atoms=30, **other))
    ingest(path, out, IngestOptions(partition_atoms=30, overwrite=True))
    assert np.isnan(open_store(out).read_structures().energy).all()  # the default keys: none


@pytest.mark.slow
def test_a_full_disk_anywhere_names_the_store_and_a_rerun_with_room_finishes(tmp_path, rng, tmpfs):
    """A disk that fills at each point of an ingest (tmpfs sizes one partition's files
    apart) is one DiskFullError naming the store or its file, never zarr's bare "[Errno 28]
    No space left on device" (it was so where zarr itself wrote a partition's group); with
    room again, the same ingest resumes to what ASE reads from the file."""
    path = tmp_path / "d.xyz"
    ase.io.write(path, random_structures(4, rng, max_atoms=12), format="extxyz")
    ref = StructureBatch.from_ase(ase.io.read(path, ":"))
    for kb in range(64, 240, 8):  # a partition's files take ~100 kB of tmpfs pages
        disk = tmpfs(f"{kb}k")
        out = disk / "s.zarr"
        try:
            ingest(path, out, IngestOptions(partition_atoms=12))
        except DiskFullError as exc:
            assert str(out) in str(exc), (kb, str(exc))
        else:
            break  # it all fitted
        tmpfs.resize(disk, "20m")
        ingest(path, out, IngestOptions(partition_atoms=12))
        assert open_store(out).read_structures().equals(ref), kb
    else:
        pytest.fail("the store never fitted: the sizes tried are too small")
