"""Featurize imports only what each side needs: no bokeh (the dashboard pages) and, for
ACSF, no torch in workers; no torch or numba in the driver (each costs seconds per process)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_TASK = textwrap.dedent(
    """
    import json, sys
    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import featurize_in_process

    root = sys.argv[1]
    source = write_emt_cu(root + "/cu.extxyz", n_structures=4, seed=1)
    acsf = ACSF.uniform(["Cu"], r_cut=4.0, cutoff="cos", radial=[(0.5, 0.0)], narrow=[])
    store = featurize_in_process(source, root + "/s.zarr", DescriptorSet(acsf=acsf))
    print(json.dumps({"complete": store.is_complete,
                      "bokeh": sorted(m for m in sys.modules if m.split(".")[0] == "bokeh"),
                      "torch": "torch" in sys.modules}))
    """
)


def test_featurize_task_loads_neither_bokeh_nor_torch(tmp_path: Path) -> None:
    """ACSF through the compiled kernel runs on numpy: a worker never imports torch."""
    out = subprocess.run(
        [sys.executable, "-c", _TASK, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["complete"] is True
    assert result["bokeh"] == []
    assert result["torch"] is False


_DRIVER = textwrap.dedent(
    """
    import json, sys
    from dparallel.cli.main import build_parser  # the CLI with every sub-command

    build_parser().parse_args(["featurize", "x.data", "--descriptors", "d.yaml", "-o", "s"])
    from dparallel.workflow.descriptors_spec import load_descriptors
    from dparallel.workflow.featurize import featurize, prepare_featurize
    from dparallel.io.synthetic import random_structures

    root, spec = sys.argv[1], sys.argv[2]
    import ase.io, numpy as np
    cu = random_structures(3, np.random.default_rng(1), min_atoms=4, max_atoms=8, elements=(29,))
    ase.io.write(root + "/cu.extxyz", cu)
    dset = load_descriptors(spec)
    source, store = prepare_featurize(root + "/cu.extxyz", root + "/s.zarr", dset, n_workers=2)
    heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "numba"})
    print(json.dumps({"pending": len(store.pending_partitions()), "r_cut": dset.r_cut,
                      "heavy": heavy}))
    """
)


def test_featurize_driver_does_not_load_torch(tmp_path: Path) -> None:
    """The CLI's parser, reading the descriptors YAML, indexing and creating the store: no
    torch, no numba (the train and export sub-commands import torch when they run)."""
    spec = Path(__file__).parents[2] / "examples" / "descriptors.yaml"
    out = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(tmp_path), str(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["pending"] >= 1
    assert result["r_cut"] == 5.0
    assert result["heavy"] == []


_PARSER = textwrap.dedent(
    """
    import json, sys
    from dparallel.cli.main import build_parser

    args = build_parser().parse_args(["featurize", "x.data", "--descriptors", "d.yaml", "-o", "s"])
    loaded = {name: name in sys.modules for name in ("numpy", "distributed")}
    print(json.dumps({"command": args.command, **loaded}))
    """
)


def test_cli_parses_its_arguments_before_numpy() -> None:
    """``dparallel featurize`` starts its workers' warm server right after parsing: the
    parser (every sub-command's options) imports neither numpy nor distributed."""
    out = subprocess.run(
        [sys.executable, "-c", _PARSER], capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"command": "featurize", "numpy": False, "distributed": False}
