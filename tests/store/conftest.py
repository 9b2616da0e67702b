"""Fixtures of the store tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def store(tmp_path, rng, monkeypatch) -> Path:
    """A store ingested from 30 random structures (≤ 8 atoms) at ``s.zarr`` in ``tmp_path``,
    the working directory."""
    import ase.io

    from dparallel.io.synthetic import random_structures
    from dparallel.workflow.ingest import IngestOptions, ingest

    monkeypatch.chdir(tmp_path)
    data = tmp_path / "in.extxyz"
    ase.io.write(data, random_structures(30, rng, max_atoms=8), format="extxyz")
    return ingest(data, "s.zarr", IngestOptions(partition_atoms=40)).store.path
