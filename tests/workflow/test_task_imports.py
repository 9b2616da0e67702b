"""A featurize task imports only what it needs: no bokeh (the dashboard pages) in workers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

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
                      "bokeh": sorted(m for m in sys.modules if m.split(".")[0] == "bokeh")}))
    """
)


def test_featurize_task_does_not_load_bokeh(tmp_path: Path) -> None:
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
