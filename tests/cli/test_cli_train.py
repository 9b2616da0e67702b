"""`dparallel train` as a user runs it: the commands it prints next run; its options."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path


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


def test_torch_threads_is_the_training_threads_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # featurize and run took --torch-threads, train only --set threads=N
    import json

    from dparallel.cli.main import main
    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = write_emt_cu(tmp_path / "cu.xyz", 6, seed=1)
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, radial=[(0.5, 0.0), (1.0, 2.5)], narrow=[])
    featurize_in_process(data, tmp_path / "s.zarr", DescriptorSet(acsf=acsf, derivatives=True),
                         FeaturizeOptions())  # fmt: skip
    small = ["--set", "epochs=1", "--set", "hidden=[4]", "-q"]
    model = tmp_path / "m"
    assert main(["train", str(tmp_path / "s.zarr"), "-o", str(model), "--torch-threads", "2",
                 *small]) == 0  # fmt: skip
    assert json.loads((model / "spec.json").read_text())["threads"] == 2
    with pytest.raises(SystemExit):
        main(["train", "s.zarr", "-o", "m", "--torch-threads", "-1"])
    assert "--torch-threads: needs at least 0 threads, got -1" in capsys.readouterr().err
