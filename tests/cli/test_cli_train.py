"""`dparallel train` as a user runs it: the commands it prints next run."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def test_the_commands_it_suggests_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # it suggested `export --format n2p2` for a neighbor-sum model, which export refuses
    from dparallel.cli.main import main
    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import NeighborSum
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = write_emt_cu(tmp_path / "cu.xyz", 6, seed=1)
    sums = NeighborSum(["Cu"], 4.0, n_sensitivities=3)
    descriptors = DescriptorSet(neighbor_sum=sums, derivatives=True)
    featurize_in_process(data, tmp_path / "s.zarr", descriptors, FeaturizeOptions())
    monkeypatch.chdir(tmp_path)
    small = ["--set", "epochs=1", "--set", "hidden=[4]", "-q"]
    assert main(["train", "s.zarr", "-o", "m", "--set", "descriptor=neighbor_sum", *small]) == 0
    out = capsys.readouterr().out
    commands = [line.split() for line in out.splitlines() if line.startswith("  dparallel ")]
    assert {"export", "evaluate"} <= {c[1] for c in commands}, out
    for command in commands:
        assert main(command[1:]) == 0, command
