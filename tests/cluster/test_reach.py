"""A memory:// location is refused where the cluster's workers are other processes (each
found an empty store of its own: 'its pointer names a generation which holds no store')."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dparallel.cluster.reach import refuse_process_local
from dparallel.io.location import LocationError


def _client(address: str) -> SimpleNamespace:
    return SimpleNamespace(scheduler=SimpleNamespace(address=address))


def test_memory_is_refused_for_workers_in_other_processes() -> None:
    with pytest.raises(LocationError, match=r"^memory://b/s.zarr: a memory:// location lives"):
        refuse_process_local(_client("tcp://127.0.0.1:8786"), "data.xyz", "memory://b/s.zarr")
    refuse_process_local(_client("inproc://10.0.0.1/1/1"), "memory://b/s.zarr")  # threads
    refuse_process_local(_client("tcp://127.0.0.1:8786"), "s3://b/s.zarr", "data.xyz")


def test_featurize_into_memory_on_a_local_cluster_is_one_line(tmp_path, capsys, monkeypatch):
    """Before: every partition failed in its worker, and the store was called lost."""
    monkeypatch.setenv("DPARALLEL_CACHE_DIR", str(tmp_path / "cache"))  # its log
    from pathlib import Path

    import dparallel
    from dparallel.cli.main import main
    from dparallel.datasets import write_emt_cu

    data = write_emt_cu(tmp_path / "cu.extxyz", 4)
    workflow = Path(dparallel.__file__).parent / "workflow" / "quickstart.yaml"  # descriptors
    argv = ["featurize", str(data), "-o", "memory://b/s.zarr", "--workflow", str(workflow),
            "--local", "1", "-q"]  # fmt: skip
    assert main(argv) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "memory://b/s.zarr: a memory:// location lives in this process alone" in err
    assert "partition" not in err


def test_a_workflow_refuses_memory_locations() -> None:
    from dparallel.errors import ConfigError
    from dparallel.workflow.spec import load_quickstart

    with pytest.raises(ConfigError, match=r"^store.path: memory://b/s.zarr lives in one"):
        load_quickstart(["store.path=memory://b/s.zarr"]).check()
