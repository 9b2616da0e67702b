"""The featurize worker preload warms a worker up in the background, without torch."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

_WORKER = textwrap.dedent(
    """
    import json, sys, threading, time
    from dparallel.workflow import featurize_worker_preload

    featurize_worker_preload.dask_setup(None)  # what a Dask worker runs at start
    vesin_at_return = "vesin" in sys.modules
    warm = [t for t in threading.enumerate() if t.name == "dparallel-warm-up"]
    for t in warm:
        t.join(timeout=600)
    from dparallel.kernels import acsf_numba
    from dparallel.store import _derivatives
    print(json.dumps({
        "vesin_at_return": vesin_at_return,
        "threads": len(warm),
        "alive": any(t.is_alive() for t in warm),
        "task_module": "dparallel.workflow.featurize_task" in sys.modules,
        "kernel_signatures": len(acsf_numba._acsf_element_jit.signatures),
        "encoder_signatures": [len(_derivatives._JIT[n].signatures) if n in _derivatives._JIT
                               else 0 for n in ("_radial_flags", "_split")],
        "torch": "torch" in sys.modules,
    }))
    """
)


def test_preload_imports_the_task_and_loads_the_kernel_without_torch() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WORKER], capture_output=True, text=True, timeout=700, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["vesin_at_return"] is True  # before the worker takes tasks
    assert result["threads"] == 1
    assert result["alive"] is False
    assert result["task_module"] is True
    assert result["kernel_signatures"] >= 1  # compiled (or loaded from numba's cache)
    # ACSF tasks get dG/dr split by the kernel: the store's radial test is not even loaded
    assert result["encoder_signatures"] == [0, 0]
    assert result["torch"] is False
