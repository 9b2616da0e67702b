"""Library ingest: resume after an interruption writes only what is missing."""

from __future__ import annotations

import ase.io
import numpy as np
import pytest

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
