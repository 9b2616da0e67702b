"""featurize from a script or notebook whose thread runs an asyncio event loop (Jupyter runs
every cell so): called from a coroutine with the user's synchronous client, and from a
thread of such a program with a local cluster of its own, it completes; an asynchronous
client is one ClusterError. Run in a child process, so that a hang fails the test."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest
from daskprocs import child_env

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from distributed import Client, LocalCluster
    from dparallel.cluster import ClusterSpec
    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.errors import ClusterError
    from dparallel.workflow.featurize import FeaturizeOptions, featurize

    def run(root, name, **where):
        acsf = ACSF.uniform(["Cu"], r_cut=4.0, cutoff="cos", radial=[(0.5, 0.0)], narrow=[])
        options = FeaturizeOptions(partition_atoms=100, **where)
        return featurize(root + "/cu.extxyz", root + f"/{name}.zarr", DescriptorSet(acsf=acsf),
                         options).n_structures

    async def main(root):
        found = {}
        with LocalCluster(n_workers=1, processes=True, dashboard_address="127.0.0.1:0") as c:
            with Client(c) as client:  # a notebook's Client(): synchronous
                found["in the loop"] = run(root, "a", client=client)
                found["in a thread"] = await asyncio.to_thread(run, root, "b", client=client)
            async with Client(c.scheduler_address, asynchronous=True) as aclient:
                try:
                    run(root, "c", client=aclient)
                except ClusterError as exc:
                    found["asynchronous"] = str(exc)
        own = ClusterSpec(n_workers=1, dashboard_address="127.0.0.1:0")
        found["own cluster"] = await asyncio.to_thread(run, root, "d", cluster=own)
        return found

    if __name__ == "__main__":
        write_emt_cu(sys.argv[1] + "/cu.extxyz", n_structures=4, seed=1)
        print(json.dumps(asyncio.run(main(sys.argv[1]))))
    """
)


def test_featurize_from_a_running_event_loop_completes_or_says_why(tmp_path: Path) -> None:
    script = tmp_path / "notebook.py"
    script.write_text(_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["in the loop"] == found["in a thread"] == found["own cluster"] == 4
    assert "asyncio.to_thread" in found["asynchronous"]
