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


_WARNING_WORKER = textwrap.dedent(
    """
    import logging, warnings
    from dparallel.workflow import featurize_worker_preload

    featurize_worker_preload.dask_setup(None)  # a worker's start, before any plugin
    warnings.warn("a warning inside a worker", UserWarning, stacklevel=1)
    logging.getLogger("distributed.worker").warning("a worker's log line")
    """
)


def test_a_worker_the_cli_started_sends_warnings_to_the_runs_log_file(
    tmp_path, monkeypatch
) -> None:  # noqa: ANN001
    import os

    from dparallel.cluster.logs import ENV_LOG_FILE, log_to_file

    monkeypatch.delenv(ENV_LOG_FILE, raising=False)  # as in a fresh `dparallel` process

    log = tmp_path / "s.zarr.log"
    undo = log_to_file(log, workers=True)  # as `dparallel featurize` (no -v) does
    try:
        env = dict(os.environ)
    finally:
        undo()
    assert env[ENV_LOG_FILE] == str(log) and ENV_LOG_FILE not in os.environ
    done = subprocess.run(
        [sys.executable, "-c", _WARNING_WORKER],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "a warning inside a worker" not in done.stderr
    assert "a worker's log line" not in done.stderr
    text = log.read_text()
    assert "a warning inside a worker" in text and "a worker's log line" in text


class _Worker:
    """What :func:`warm_up_device` reads of a Dask worker: its resources."""

    def __init__(self, resources: dict[str, float] | None) -> None:
        self.state = type("State", (), {"total_resources": resources})()


@pytest.mark.parametrize(
    ("worker", "device"),
    [
        (_Worker({"GPU": 1}), "cuda"),
        (_Worker({"GPU": 0}), "cpu"),
        (_Worker({}), "cpu"),
        (_Worker(None), "cpu"),
        (None, "cpu"),
    ],
)
def test_a_worker_holding_the_gpu_resource_warms_up_the_device(worker, device) -> None:  # noqa: ANN001
    from dparallel.workflow.featurize_worker_preload import warm_up_device

    assert warm_up_device(worker) == device


def test_a_gpu_warm_up_runs_the_device_engine_after_the_cpu_kernel(monkeypatch) -> None:  # noqa: ANN001
    """The CPU warm-up first, then the same set once on the device (where a task computes)."""
    from dparallel.workflow import featurize_task, featurize_worker_preload

    seen: list[str] = []
    real = featurize_task.task_descriptors

    def recording(batch, dset, nb=None, device="cpu"):  # noqa: ANN001, ANN202
        seen.append(device)
        return real(batch, dset, nb, "cpu")  # no CUDA here: the arrays of the CPU kernel

    monkeypatch.setattr(featurize_task, "task_descriptors", recording)
    featurize_worker_preload.warm_up("cuda")
    assert seen == ["cpu", "cuda"]
    seen.clear()
    featurize_worker_preload.warm_up()
    assert seen == ["cpu"]


def test_a_gpu_warm_up_without_a_usable_device_falls_back_quietly() -> None:
    """Asked for "cuda" where no CUDA device is usable, the warm-up still completes (the
    device engine declines and the CPU computes, as in a task)."""
    import torch

    from dparallel.workflow.featurize_worker_preload import warm_up

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the device path is the one taken")
    warm_up("cuda")
